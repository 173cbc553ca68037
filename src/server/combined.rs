//! HTTP and WebSocket on one port (features `http` and `ws`), as geth and
//! anvil serve them: a `POST` is a JSON-RPC call over HTTP, a `GET` asking
//! for a WebSocket upgrade becomes a WebSocket connection served by a
//! [`WsServer`].
//!
//! [`Combined`] is the `tower` service that tells the two apart (one
//! [`is_upgrade_request`] check per request); [`serve`] runs it on a
//! listener with the HTTP [`Server`]'s accept loop,
//! limits and graceful shutdown.
//!
//! | request | answer |
//! | --- | --- |
//! | a valid WebSocket upgrade (`GET`, `Connection: upgrade`, `Upgrade: websocket`, `Sec-WebSocket-Version: 13`, a key) | `101 Switching Protocols`, then the connection is the [`WsServer`]'s |
//! | an upgrade request that is not valid (no key) | `400`, a -32600 body saying why |
//! | an upgrade request for another `Sec-WebSocket-Version` | `426` with `Sec-WebSocket-Version: 13`, a -32600 body |
//! | a valid upgrade past the [`WsServer`]'s connection limit | `503`, a -32000 body with the limit |
//! | an upgrade for a host the HTTP service's [`allowed_hosts`](HttpService::allowed_hosts) does not list | `403`, a -32600 body, as for a `POST` (see [`hosts`](super::hosts)) |
//! | served by [`serve`] (or a [`Server`]), allowlist or not: an upgrade without one `Host` (none, or two) | `400`, a -32600 body, as for a `POST` |
//! | an upgrade from an `Origin` the HTTP service's [`Cors`](super::cors::Cors) policy or the WebSocket server's [`origins`](WsServer::origins) does not allow | `403`, a -32600 body naming the origin |
//! | anything else | the [`HttpService`]'s answer (see [`super::http`]) |
//!
//! Once upgraded, a connection is no longer under the HTTP server's limits
//! (its idle and header timers, [`Limits::max_connections`]): the
//! [`WsServer`]'s own limits, metrics and shutdown signal apply, its
//! connection limit included (an upgrade past it is answered `503`).
//! [`serve`]'s [`Shutdown`] stops both (the WebSocket server's own
//! signal stops its side alone), and `serve` returns once the upgraded
//! connections have closed too (when serving [`Combined`] with a
//! [`Server`] of your own, give both the same signal and await
//! [`WsServer::closed`] after it).
//!
//! Handlers of an upgraded connection see, as over HTTP, the upgrade
//! request's headers ([`header`](super::http::header), or the whole
//! [`HeaderMap`](crate::http::HeaderMap) extension: an `Authorization`
//! checked per call) and the client's address; the transport is `"ws"`.
//!
//! ```no_run
//! use rpcwire::server::{Limits, Shutdown, combined, http::HttpService, ws::WsServer};
//! use rpcwire::{Call, Dispatcher};
//! # async fn run() -> std::io::Result<()> {
//! let d = Dispatcher::builder(())
//!     .method("eth_chainId", |c: Call<'_, ()>| c.reply.raw(br#""0x1""#))
//!     .build()
//!     .unwrap();
//! let (limits, shutdown) = (Limits::default(), Shutdown::new());
//! let http = HttpService::new(d.clone(), &limits, None);
//! let ws = WsServer::new(d).limits(limits.clone());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8545").await?;
//! combined::serve(listener, http, ws, limits, None, shutdown).await;
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use futures_util::future::{Either, Ready, ready};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tower_service::Service;

use super::http::{
    ConnectionKit, HttpService, Lingering, OwnConnection, PerConnection, ResponseBody,
    ResponseFuture, Server,
};
use super::ws::{
    WsServer, asks_another_version, bad_upgrade_body, is_upgrade_request, upgrade_response,
};
use super::{Limits, Metrics, Shutdown};
use crate::Context;

/// A `tower` service answering HTTP requests with an [`HttpService`] and
/// upgrading WebSocket requests to a [`WsServer`] connection; see the
/// [module docs](self).
pub struct Combined<S, K> {
    http: HttpService<S, K>,
    ws: Arc<WsServer<S, K>>,
    peer: Option<SocketAddr>,
}

impl<S, K> Clone for Combined<S, K> {
    fn clone(&self) -> Self {
        Combined {
            http: self.http.clone(),
            ws: Arc::clone(&self.ws),
            peer: self.peer,
        }
    }
}

impl<S, K> std::fmt::Debug for Combined<S, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combined")
            .field("http", &self.http)
            .field("ws", &self.ws)
            .field("peer", &self.peer)
            .finish()
    }
}

impl<S: Send + Sync + 'static, K: 'static> Combined<S, K> {
    /// Serves HTTP with `http` and WebSocket upgrades with `ws`.
    pub fn new(http: HttpService<S, K>, ws: WsServer<S, K>) -> Self {
        Combined {
            http,
            ws: Arc::new(ws),
            peer: None,
        }
    }

    /// The same service, telling handlers (HTTP and WebSocket alike) that
    /// requests come from `peer`.
    pub fn with_peer_addr(self, peer: SocketAddr) -> Self {
        self.on_connection(peer, Arc::default())
    }

    fn on_connection(mut self, peer: SocketAddr, lingering: Arc<Lingering>) -> Self {
        self.http = self.http.on_connection(peer, lingering);
        self.peer = Some(peer);
        self
    }

    /// Answers an upgrade request with `101` and serves the upgraded
    /// connection on a task of its own.
    fn upgrade<B>(&self, mut req: Request<B>) -> Response<ResponseBody> {
        // A rebound page's upgrade says its own domain in `Host`.
        if let Some(refused) = self.http.refuse_host(&req) {
            return refused;
        }
        // Browsers do not preflight upgrades: the `Origin` is checked here.
        let headers = req.headers();
        // Every answer but the switch says it varies with `Origin` while
        // the HTTP service lists origins, as the service's own do.
        let refused = |mut response: Response<ResponseBody>| {
            if self.http.varies_with_origin() {
                response
                    .headers_mut()
                    .append(http::header::VARY, http::HeaderValue::from_static("origin"));
            }
            response
        };
        if let Some(origin) = self.http.refuses(headers).or(self.ws.refuses(headers)) {
            return refused(super::http::forbidden_origin(origin));
        }
        let response = match upgrade_response(&req) {
            Ok(r) => r,
            Err(e) => return refused(bad_upgrade(&req, &e.to_string())),
        };
        let Some(place) = self.ws.place() else {
            return refused(too_many_connections(self.ws.connection_limit()));
        };
        let on_upgrade = hyper::upgrade::on(&mut req);
        let (parts, _) = req.into_parts();
        let mut ctx = Context::builder();
        if let Some(peer) = self
            .peer
            .or_else(|| parts.extensions.get::<SocketAddr>().copied())
        {
            ctx = ctx.peer_addr(peer);
        }
        let ctx = ctx.extension(parts.headers);
        let ws = Arc::clone(&self.ws);
        tokio::spawn(async move {
            let _place = place;
            // Fails when the client goes away before the switch.
            if let Ok(upgraded) = on_upgrade.await {
                ws.serve_connection(TokioIo::new(upgraded), ctx).await;
            }
        });
        let (parts, ()) = response.into_parts();
        Response::from_parts(parts, Full::new(Bytes::new()))
    }
}

impl<S, K, B> Service<Request<B>> for Combined<S, K>
where
    S: Send + Sync + 'static,
    K: 'static,
    B: Body,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future =
        Either<ResponseFuture<S, K, B>, Ready<Result<Response<ResponseBody>, Infallible>>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if is_upgrade_request(&req) {
            Either::Right(ready(Ok(self.upgrade(req))))
        } else {
            Either::Left(self.http.call(req))
        }
    }
}

/// The answer to an upgrade request that is not valid: `426` with the
/// version this server speaks for another `Sec-WebSocket-Version` (RFC 6455
/// §4.2.2), `400` otherwise; a -32600 body saying why.
fn bad_upgrade<B>(request: &Request<B>, reason: &str) -> Response<ResponseBody> {
    let body = bad_upgrade_body(reason);
    if asks_another_version(request.headers()) {
        let mut response = json_error(StatusCode::UPGRADE_REQUIRED, body);
        response.headers_mut().insert(
            "sec-websocket-version",
            http::HeaderValue::from_static("13"),
        );
        // RFC 9110 15.5.22: a 426 names the protocol to upgrade to.
        response.headers_mut().insert(
            http::header::UPGRADE,
            http::HeaderValue::from_static("websocket"),
        );
        return response;
    }
    json_error(StatusCode::BAD_REQUEST, body)
}

/// The `503` for an upgrade past the WebSocket server's connection limit.
fn too_many_connections(limit: usize) -> Response<ResponseBody> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32000,"message":"Server error","data":{{"reason":"too many WebSocket connections","limit":{limit}}}}}}}"#
    );
    json_error(StatusCode::SERVICE_UNAVAILABLE, body)
}

fn json_error(status: StatusCode, body: String) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Serves HTTP and WebSocket on `listener` until `shutdown` is triggered:
/// the HTTP [`Server`] (with `limits` and `metrics`) running [`Combined`].
/// The connections upgraded here close when `shutdown` is triggered
/// (their grace running beside the HTTP side's), or when `ws`'s own
/// signal ([`WsServer::shutdown`]) is, which leaves HTTP served; this
/// returns once they have closed ([`WsServer::closed`]). Neither signal
/// is triggered by this call: `ws`'s may be shared with other servers,
/// or with clones of `ws` serving elsewhere.
pub async fn serve<S, K>(
    listener: TcpListener,
    http: HttpService<S, K>,
    ws: WsServer<S, K>,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
) where
    S: Send + Sync + 'static,
    K: 'static,
{
    let mut server = Server::new(limits);
    if let Some(metrics) = metrics {
        server = server.metrics(metrics);
    }
    // This port's upgraded connections watch a signal of their own, fired
    // by either: a `ws` not given `shutdown` (`WsServer::shutdown` not
    // called) once kept them open through this call's return.
    let caller_ws = ws.shutdown_signal().clone();
    let port = Shutdown::new();
    let combined = Combined::new(http, ws.shutdown(port.clone()));
    let ws = Arc::clone(&combined.ws);
    let relay = async {
        tokio::select! {
            () = shutdown.triggered() => {}
            () = caller_ws.triggered() => {}
        }
        port.trigger();
        std::future::pending::<()>().await
    };
    let run = async {
        server.serve(listener, combined, shutdown.clone()).await;
        port.trigger();
        ws.closed().await;
    };
    tokio::select! {
        () = run => {}
        () = relay => {}
    }
}

impl<S: Send + Sync + 'static, K: 'static> PerConnection for Combined<S, K> {
    type Service = Combined<S, K>;

    fn for_peer(&self, peer: SocketAddr) -> Self::Service {
        self.for_peer_on_server(peer, &Arc::default())
    }

    fn answers_host_rule(&self) -> bool {
        true
    }

    fn serve_own_http1(
        &self,
        peer: SocketAddr,
        stream: TcpStream,
        kit: &ConnectionKit,
        lingering: &Arc<Lingering>,
    ) -> Result<OwnConnection, TcpStream> {
        let service = self.for_peer_on_server(peer, lingering);
        Ok(kit.own_http1(stream, service.http.clone(), service))
    }

    fn for_peer_on_server(&self, peer: SocketAddr, lingering: &Arc<Lingering>) -> Self::Service {
        let mut service = self.clone().on_connection(peer, Arc::clone(lingering));
        // Its HTTP service answers for the server (upgrades included).
        service.http = service.http.on_server();
        service
    }
}
