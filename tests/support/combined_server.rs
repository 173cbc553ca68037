//! HTTP and WebSocket on one loopback port (`server::combined::serve`),
//! started in a task: what tests/http.rs, http_cors.rs, chaos.rs,
//! leaks.rs, ws_abandon.rs and server_edges.rs each wrote out (the HTTP
//! service, the WebSocket server sharing its shutdown, the listener, the
//! spawn). What they vary (limits of either side, metrics, CORS, a
//! WebSocket server built for more than this port) is a method here; left
//! alone, both sides keep their defaults (`Limits::default()`, no metrics,
//! no CORS policy, a shutdown signal of their own). tests/eth_user.rs
//! keeps its own start: it shows the server a user writes from the public
//! API alone.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use rpcwire::Dispatcher;
use rpcwire::server::cors::Cors;
use rpcwire::server::hosts::AllowedHosts;
use rpcwire::server::http::HttpService;
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Metrics, Shutdown, combined};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What is to be served on the port: set with the methods, then
/// [`start`](StartCombined::start) or [`start_on`](StartCombined::start_on).
pub struct StartCombined<S, K> {
    dispatcher: Dispatcher<S, K>,
    /// The HTTP side's: its server's (connections, timeouts) and its
    /// service's (body size, body timeout).
    http_limits: Limits,
    /// Given to the HTTP service (limit hits) and its server (connections).
    http_metrics: Option<Arc<Metrics>>,
    cors: Option<Cors>,
    hosts: Option<AllowedHosts>,
    /// The WebSocket side; its shutdown signal is the port's.
    ws: WsServer<S, K>,
}

/// The port, served until its shutdown is triggered.
pub struct CombinedServer {
    pub addr: SocketAddr,
    /// Stops both sides (the WebSocket server's signal, which
    /// `combined::serve` is also given).
    pub shutdown: Shutdown,
    /// Ends when `combined::serve` returns: after the shutdown, once the
    /// upgraded connections have closed too.
    pub task: JoinHandle<()>,
}

impl<S: Send + Sync + 'static, K: 'static> StartCombined<S, K> {
    /// Both sides answering with `dispatcher`.
    pub fn new(dispatcher: Dispatcher<S, K>) -> Self {
        StartCombined {
            ws: WsServer::new(dispatcher.clone()),
            dispatcher,
            http_limits: Limits::default(),
            http_metrics: None,
            cors: None,
            hosts: None,
        }
    }

    /// The HTTP service's `Host` allowlist (upgrades pass it too).
    pub fn allowed_hosts(mut self, hosts: AllowedHosts) -> Self {
        self.hosts = Some(hosts);
        self
    }

    /// `limits` on both sides.
    pub fn limits(self, limits: Limits) -> Self {
        self.http_limits(limits.clone()).ws_limits(limits)
    }

    /// `limits` on the HTTP side only (its server and its service).
    pub fn http_limits(mut self, limits: Limits) -> Self {
        self.http_limits = limits;
        self
    }

    /// `limits` on the WebSocket side only (`WsServer::limits`: upgraded
    /// connections count against its `max_connections`, not the HTTP
    /// server's).
    pub fn ws_limits(mut self, limits: Limits) -> Self {
        self.ws = self.ws.limits(limits);
        self
    }

    /// Where the HTTP service and server count (limit hits, connections
    /// until they are upgraded).
    pub fn http_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.http_metrics = Some(metrics);
        self
    }

    /// Where the WebSocket server counts (its connections, upgraded here).
    pub fn ws_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.ws = self.ws.metrics(metrics);
        self
    }

    /// The HTTP service's CORS policy (which also judges upgrades'
    /// `Origin` on this port).
    pub fn cors(mut self, cors: Cors) -> Self {
        self.cors = Some(cors);
        self
    }

    /// A shutdown signal shared with other servers, for both sides.
    pub fn shutdown(mut self, shutdown: Shutdown) -> Self {
        self.ws = self.ws.shutdown(shutdown);
        self
    }

    /// `ws` as the WebSocket side, as built (its limits, metrics, origins
    /// and shutdown signal, which becomes the port's): for a test that
    /// also serves it elsewhere, a listener of its own, and so shares its
    /// connection places. Later [`limits`](Self::limits),
    /// [`ws_limits`](Self::ws_limits), [`ws_metrics`](Self::ws_metrics)
    /// and [`shutdown`](Self::shutdown) would change it.
    pub fn ws(mut self, ws: WsServer<S, K>) -> Self {
        self.ws = ws;
        self
    }

    /// Serves on a fresh port of 127.0.0.1.
    pub async fn start(self) -> CombinedServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.start_on(listener)
    }

    /// Serves on `listener` (for a test that bound it before knowing
    /// which server it would get).
    pub fn start_on(self, listener: TcpListener) -> CombinedServer {
        let addr = listener.local_addr().unwrap();
        let mut http = HttpService::new(
            self.dispatcher,
            &self.http_limits,
            self.http_metrics.clone(),
        );
        if let Some(cors) = self.cors {
            http = http.cors(cors);
        }
        if let Some(hosts) = self.hosts {
            http = http.allowed_hosts(hosts);
        }
        let shutdown = self.ws.shutdown_signal().clone();
        let task = tokio::spawn(combined::serve(
            listener,
            http,
            self.ws,
            self.http_limits,
            self.http_metrics,
            shutdown.clone(),
        ));
        CombinedServer {
            addr,
            shutdown,
            task,
        }
    }
}
