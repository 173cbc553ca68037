//! The HTTP service mounted in an axum router, as its docs say it can be:
//! JSON-RPC on one route beside a `/metrics` endpoint and a health check,
//! a tower layer around the service, the client's address and headers
//! reaching handlers through axum's connection info, and every refusal the
//! service makes (405, 415, 413, 204 for notifications) coming through
//! axum unchanged. Over loopback, with hyper's client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::routing::get;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rpcwire::server::http::{HttpService, header};
use rpcwire::server::{Limits, Metrics};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::net::TcpListener;

const HANG: Duration = Duration::from_secs(30);

fn dispatcher(metrics: Arc<Metrics>) -> Dispatcher<()> {
    Dispatcher::builder(())
        .method("eth_blockNumber", |call: Call<'_, ()>| {
            call.reply.str("0x1b4")
        })
        .method("whoami", |call: Call<'_, ()>| {
            Ok::<_, RpcError>(json!({
                "transport": call.ctx.transport(),
                "peer": call.ctx.peer_addr().map(|a| a.to_string()),
                "tenant": header(call.ctx, "x-tenant").and_then(|v| v.to_str().ok()),
            }))
        })
        .method("log", |_: Call<'_, ()>| Ok::<_, RpcError>(()))
        .observer(metrics)
        .build()
        .unwrap()
}

struct App {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// `/rpc` is rpcwire's service (behind tower's concurrency limit), `/metrics`
/// renders its counters, `/health` is axum's own handler. A request layer
/// hands axum's `ConnectInfo` to the service as the `SocketAddr` extension
/// it reads the client's address from.
async fn start() -> (App, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let limits = Limits {
        max_message_len: 4096,
        ..Limits::default()
    };
    let rpc = HttpService::new(dispatcher(metrics.clone()), &limits, Some(metrics.clone()));
    let rendered = metrics.clone();
    let app = axum::Router::new()
        .route_service(
            "/rpc",
            tower::ServiceBuilder::new()
                .concurrency_limit(16)
                .service(rpc),
        )
        .route(
            "/metrics",
            get(move || {
                let metrics = rendered.clone();
                async move { metrics.render() }
            }),
        )
        .route("/health", get(|| async { "ok" }))
        .layer(tower::util::MapRequestLayer::new(
            |mut req: axum::extract::Request| {
                let info = req.extensions().get::<ConnectInfo<SocketAddr>>().copied();
                if let Some(ConnectInfo(addr)) = info {
                    req.extensions_mut().insert(addr);
                }
                req
            },
        ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = stopped.await;
    });
    let task = tokio::spawn(async move { served.await });
    (App { addr, stop, task }, metrics)
}

impl App {
    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        extra: Option<(&str, &str)>,
        body: &str,
    ) -> (StatusCode, String) {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        if let Some((name, value)) = extra {
            req = req.header(name, value);
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        let res = tokio::time::timeout(HANG, client.request(req))
            .await
            .expect("answered")
            .unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    async fn rpc(&self, body: &str) -> (StatusCode, String) {
        let json = Some("application/json");
        self.send(Method::POST, "/rpc", json, None, body).await
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(HANG, self.task)
            .await
            .expect("axum stopped")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_is_served_on_an_axum_route_beside_other_routes() {
    let (app, metrics) = start().await;

    let (status, body) = app
        .rpc(r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, r#"{"jsonrpc":"2.0","id":1,"result":"0x1b4"}"#);

    // The client's address (from axum's connection info) and the request's
    // headers reach the handler.
    let json = Some("application/json");
    let whoami = r#"{"jsonrpc":"2.0","id":2,"method":"whoami"}"#;
    let tenant = Some(("x-tenant", "acme"));
    let (status, body) = app.send(Method::POST, "/rpc", json, tenant, whoami).await;
    assert_eq!(status, StatusCode::OK);
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["result"]["transport"], "http");
    assert_eq!(reply["result"]["tenant"], "acme");
    let peer: SocketAddr = reply["result"]["peer"].as_str().unwrap().parse().unwrap();
    assert_eq!(peer.ip(), app.addr.ip());
    assert_ne!(
        peer.port(),
        app.addr.port(),
        "the client's port, not the server's"
    );

    // A batch, a notification (204, empty), a parse error (-32700 in a 200).
    let batch = r#"[{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":4,"method":"nope"}]"#;
    let (status, body) = app.rpc(batch).await;
    assert_eq!(status, StatusCode::OK);
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply[0]["result"], "0x1b4");
    assert_eq!(reply[1]["error"]["code"], -32601);
    let (status, body) = app.rpc(r#"{"jsonrpc":"2.0","method":"log"}"#).await;
    assert_eq!((status, body.as_str()), (StatusCode::NO_CONTENT, ""));
    let (status, body) = app.rpc(r#"{"jsonrpc":"2.0","id":5,"#).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#""code":-32700"#), "{body}");

    // axum's own routes answer beside it; the metrics endpoint shows the
    // calls the service answered.
    let (status, body) = app.send(Method::GET, "/health", None, None, "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    let (status, body) = app.send(Method::GET, "/metrics", None, None, "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("rpcwire_calls_total{method=\"eth_blockNumber\"} 2"),
        "{body}"
    );
    assert!(
        body.contains("rpcwire_errors_total{code=\"-32601\"} 1"),
        "{body}"
    );
    assert_eq!(
        metrics.connections_open(),
        0,
        "axum's connections are its own"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_refusals_come_through_axum_unchanged() {
    let (app, metrics) = start().await;
    let json = Some("application/json");
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#;

    // Methods other than POST reach the service (route_service takes them
    // all) and get its 405 with a JSON-RPC body.
    let (status, body) = app.send(Method::GET, "/rpc", json, None, "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(body.contains(r#""code":-32600"#), "{body}");
    // A content type that is not JSON: 415.
    let text = Some("text/plain");
    let (status, body) = app.send(Method::POST, "/rpc", text, None, call).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(body.contains(r#""code":-32600"#), "{body}");
    // A body past the service's limit: 413 with the limit in `data`,
    // counted.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":["{}"]}}"#,
        "x".repeat(5000)
    );
    let (status, body) = app.rpc(&big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body.contains(r#""limit":4096"#), "{body}");
    assert!(
        metrics
            .render()
            .contains("rpcwire_limit_hits_total{limit=\"message_len\"} 1"),
        "{}",
        metrics.render()
    );
    // A path no route takes is axum's 404, not the service's.
    let (status, _) = app.send(Method::POST, "/other", json, None, call).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // And the service still answers after all of that.
    let (status, body) = app.rpc(call).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, r#"{"jsonrpc":"2.0","id":1,"result":"0x1b4"}"#);
    app.stop().await;
}
