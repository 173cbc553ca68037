//! The transports' tests (stream, HTTP, WebSocket, MCP, LSP), one test
//! binary: as 21 binaries, each compiled and linked its own copy of the
//! servers' generic code (tokio, hyper, tungstenite, rpcwire's drivers),
//! a quarter of the test suite's build. Each module is one former file, under
//! the features it needs. Everything on 127.0.0.1, every server started
//! and stopped by its test.
//!
//! Tests that read the whole process (a counting allocator's heap, its
//! sockets, its tasks) stay binaries of their own (`tests/http.rs`,
//! `tests/ws.rs`, `tests/leaks.rs`, `tests/chaos.rs`, ...): tests running
//! beside them would move their counts.
#![allow(dead_code)]

// What the modules share, each under the features its code needs.
#[cfg(all(feature = "http", feature = "ws"))]
#[path = "../support/asking.rs"]
mod asking;
#[path = "../support/combined_server.rs"]
mod combined_server;
#[path = "../support/eventually.rs"]
mod eventually;
#[path = "../support/example_binary.rs"]
mod example_binary;
#[cfg(feature = "http")]
#[path = "../support/h2_client.rs"]
mod h2_client;
#[path = "../support/held_calls.rs"]
mod held_calls;
#[cfg(feature = "http")]
#[path = "../support/http_replies.rs"]
mod http_replies;
#[path = "../support/http_request.rs"]
mod http_request;
#[cfg(feature = "mcp")]
#[path = "../support/mcp_http.rs"]
mod mcp_http;
#[cfg(target_os = "linux")]
#[path = "../support/proc_tcp.rs"]
mod proc_tcp;
#[cfg(feature = "http")]
#[path = "../support/served_http.rs"]
mod served_http;

#[cfg(all(feature = "http", feature = "peers"))]
mod axum_router;
#[cfg(feature = "ws")]
mod cap_cancel;
#[cfg(feature = "http")]
mod http2;
#[cfg(feature = "http")]
mod http2_budget;
#[cfg(feature = "http")]
mod http_abandon;
#[cfg(all(feature = "http", feature = "ws"))]
mod http_cors;
#[cfg(all(feature = "http", feature = "ws"))]
mod http_hosts;
#[cfg(feature = "http")]
mod http_hyper_edges;
#[cfg(feature = "http")]
mod http_shutdown;
mod lsp;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(feature = "mcp")]
mod mcp_asking;
#[cfg(feature = "mcp")]
mod mcp_edges;
#[cfg(feature = "mcp")]
mod mcp_hosts;
mod peer_cancel;
#[cfg(all(feature = "http", feature = "ws"))]
mod server_edges;
mod stream;
mod stream_abandon;
mod stream_client;
mod stream_edges;
#[cfg(feature = "ws")]
mod subscription_replies;
mod tcp_liveness;
#[cfg(all(feature = "http", feature = "ws"))]
mod ws_abandon;
