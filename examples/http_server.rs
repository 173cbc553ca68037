//! JSON-RPC over HTTP with a Prometheus `/metrics` endpoint next to it.
//!
//! ```text
//! cargo run --features http --example http_server [127.0.0.1:8545]
//! curl -s -H 'content-type: application/json' \
//!      --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' http://127.0.0.1:8545/
//! curl -s http://127.0.0.1:8545/metrics
//! ```
//!
//! Ctrl-C (or SIGTERM) shuts it down gracefully.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http_body_util::Full;
use hyper::body::Incoming;
use rpcwire::bytes::Bytes;
use rpcwire::dispatch::WithAsync;
use rpcwire::http::header::HOST;
use rpcwire::http::{Method, Request, Response, StatusCode};
use rpcwire::server::hosts::AllowedHosts;
use rpcwire::server::http::{HttpService, ResponseBody, serve};
use rpcwire::server::{Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use tower::Service;

#[path = "support/stop_signal.rs"]
mod stop_signal;
use stop_signal::stop_signal;

struct Node {
    height: AtomicU64,
}

/// `GET /metrics` answers the counters; everything else is JSON-RPC.
#[derive(Clone)]
struct WithMetrics {
    rpc: HttpService<Node, WithAsync>,
    metrics: Arc<Metrics>,
    /// The hosts the JSON-RPC service answers, checked here for `/metrics`
    /// too (a rebound page could read it).
    hosts: AllowedHosts,
}

impl Service<Request<Incoming>> for WithMetrics {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Service::<Request<Incoming>>::poll_ready(&mut self.rpc, cx)
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        if req.method() == Method::GET && req.uri().path() == "/metrics" {
            let host = match req.uri().authority() {
                Some(authority) => Some(authority.as_str().as_bytes()),
                None => req.headers().get(HOST).map(|h| h.as_bytes()),
            };
            if !host.is_some_and(|h| self.hosts.allows(h)) {
                let response = Response::builder()
                    .status(StatusCode::FORBIDDEN)
                    .body(Full::new(Bytes::from_static(b"host not allowed\n")))
                    .expect("a valid response");
                return Box::pin(std::future::ready(Ok(response)));
            }
            let text = self.metrics.render();
            let response = Response::builder()
                .header("content-type", "text/plain; version=0.0.4")
                .body(Full::new(Bytes::from(text)))
                .expect("a valid response");
            return Box::pin(std::future::ready(Ok(response)));
        }
        Box::pin(self.rpc.call(req))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `args_os`: `args` panics on an argument that is not Unicode.
    let addr: SocketAddr = match std::env::args_os().nth(1) {
        Some(arg) => arg
            .into_string()
            .map_err(|arg| format!("not an address: {arg:?}"))?
            .parse()?,
        None => "127.0.0.1:8545".parse()?,
    };
    let metrics = Arc::new(Metrics::default());
    let dispatcher = Dispatcher::builder(Node {
        height: AtomicU64::new(0x1b4),
    })
    .method("eth_blockNumber", |call: Call<'_, Node>| {
        Ok::<_, rpcwire::RpcError>(format!("{:#x}", call.state.height.load(Ordering::Relaxed)))
    })
    .method("eth_chainId", |call: Call<'_, Node>| call.reply.str("0x1"))
    .async_method(
        "evm_mine",
        |call: rpcwire::dispatch::AsyncCall<Node>| async move {
            let height = call.state.height.fetch_add(1, Ordering::Relaxed) + 1;
            Ok::<_, RpcError>(format!("{height:#x}"))
        },
    )
    .observer(metrics.clone())
    .build()?;
    let limits = Limits::default();
    // Only requests naming this machine (IP addresses always pass): a page
    // of another site that makes its name resolve to 127.0.0.1 (DNS
    // rebinding) calls with same-origin requests, no preflight, which the
    // `Host` it names gives away. List the names a deployment is reached by.
    let hosts = AllowedHosts::list(["localhost"])?;
    let rpc =
        HttpService::new(dispatcher, &limits, Some(metrics.clone())).allowed_hosts(hosts.clone());
    let service = WithMetrics {
        rpc,
        metrics: metrics.clone(),
        hosts,
    };
    let make = move |peer| WithMetrics {
        rpc: service.rpc.clone().with_peer_addr(peer),
        ..service.clone()
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    // Before it says where it listens: a stop signal from then on is
    // caught.
    let stopped = stop_signal();
    eprintln!(
        "JSON-RPC on http://{}/, metrics on /metrics",
        listener.local_addr()?
    );
    let shutdown = Shutdown::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        stopped.await;
        eprintln!("shutting down");
        stop.trigger();
    });
    serve(listener, make, limits, Some(metrics), shutdown).await;
    Ok(())
}
