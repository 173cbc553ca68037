//! rpcwire: a zero-copy, high-throughput JSON-RPC 2.0 parser and
//! dispatcher.
//!
//! JSON-RPC 2.0 defines only an envelope (`jsonrpc`, `id`, `method`,
//! `params`), and everything inside `params` belongs to the protocol above
//! (Ethereum's execution API, MCP, LSP). rpcwire reads that envelope straight
//! from a borrowed byte slice in one pass, validating the whole message as
//! JSON, without allocating; keeps `params` as a validated raw byte range
//! until a handler asks for it; routes `method` through a perfect-hash table;
//! and writes replies straight into the caller's buffer, ids echoed byte for
//! byte.
//!
//! ```
//! use rpcwire::{Call, Connection, Dispatcher};
//!
//! let d = Dispatcher::builder(0x1b4u64)
//!     .method("eth_blockNumber", |call: Call<'_, u64>| {
//!         Ok::<_, rpcwire::RpcError>(format!("{:#x}", call.state))
//!     })
//!     .build()?;
//! let (mut conn, mut out) = (Connection::new(), Vec::new());
//! d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#, &mut conn, &mut out);
//! assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0x1b4"}"#);
//! # Ok::<(), rpcwire::router::BuildError>(())
//! ```
//!
//! The parser on its own:
//!
//! ```
//! use rpcwire::message::Message;
//! use rpcwire::request::Entry;
//!
//! let arena = rpcwire::bumpalo::Bump::new();
//! let input = br#"[{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0xab","latest"]},
//!                  {"jsonrpc":"2.0","method":"log"},
//!                  {"jsonrpc":"1.0","id":"x","method":"m"}]"#;
//! let Message::Batch(batch) = rpcwire::parse(input, &arena)? else { unreachable!() };
//! let entries: Vec<Entry> = batch.collect();
//! let call = entries[0].request().unwrap();
//! assert_eq!(call.method(), "eth_getBalance");
//! assert_eq!(call.params().unwrap().nth(1).unwrap().as_str(), Some("latest"));
//! assert!(entries[1].is_notification());
//! let bad = entries[2].invalid().unwrap();
//! assert_eq!((bad.id().as_bytes(), bad.error().code()), (&b"\"x\""[..], -32600));
//! # Ok::<(), rpcwire::Error>(())
//! ```
//!
//! # Layers
//!
//! * scan (private): byte-level JSON grammar. Its SIMD kernels are chosen
//!   at run time: the end of a run of string content (SSE2, then AVX2 for
//!   long strings when the CPU has it, on x86_64; NEON on aarch64; eight
//!   bytes at a time in a `u64` elsewhere), and on x86_64 with AVX2 a
//!   32-byte text-block loop (UTF-8 checked as classified) and a 64-byte
//!   number-run classifier.
//! * envelope: [`Parser`] (limits) and its entry points [`parse`],
//!   [`parse_response`], [`Parser::parse_incoming`] (two-way traffic) and
//!   [`Parser::parse_prefix`] (incremental input); the results are in
//!   [`message`], [`request`] and [`response`].
//! * views: [`Id`], [`request::Params`], [`json::RawJson`],
//!   [`json::JsonStr`].
//! * [`router`]: a perfect-hash table built once.
//! * [`dispatch`]: [`Dispatcher`], [`Call`], [`RpcError`]; one reply writer
//!   for sync and async handlers.
//! * [`Connection`] and [`Context`] (per-connection state and what handlers
//!   see of it), [`peer`] (outbound requests and notifications, the
//!   pending-request table).
//! * [`frame`]: incremental framers for stream transports (newline, LSP
//!   `Content-Length`, concatenated JSON), no I/O.
//!
//! # What is accepted
//!
//! Exactly what `serde_json::from_slice::<&serde_json::value::RawValue>`
//! accepts (RFC 8259, UTF-8), apart from the nesting limit (default 128
//! levels, the message itself counted; see [`Parser::max_depth`]); the
//! `differential` fuzz target checks the agreement. Every edge case of the
//! JSON-RPC 2.0 specification is answered as [`Parser::parse`] and
//! [`Dispatcher::handle`] describe.
//!
//! # Feature flags
//!
//! * `async`: async handlers (`DispatcherBuilder::async_method`,
//!   `Dispatcher::handle_async`, `Connection::start` for pipelining), with a
//!   concurrency cap, per-request
//!   timeouts and cancellation; adds `tokio` (time, sync, rt),
//!   `futures-util` and `pin-project-lite`.
//! * `tokio`: the same, under the name users of tokio look for.
//! * `tracing`: a `tracing` span per call (method, id, error code).
//! * `server`: servers on tokio (module `server`): limits, metrics, graceful
//!   shutdown, subscriptions, and the stdio, TCP and Unix-socket transports.
//! * `http`: the HTTP transport (`server::http`): a `tower::Service` for
//!   JSON-RPC over `POST` on hyper 1.x (HTTP/1.1 keep-alive, HTTP/2), and a
//!   server with connection limits, timeouts and graceful shutdown; adds
//!   `hyper`, `hyper-util`, `http` (re-exported as `rpcwire::http`),
//!   `http-body(-util)`, `tower-service`, `httparse`, `httpdate`, `h2`
//!   (already built for hyper: to tell an HTTP/2 client it cut off for
//!   abuse) and `flate2` (gzip answers).
//! * `ws`: the WebSocket transport (`server::ws`, on tokio-tungstenite):
//!   pipelining, server-pushed notifications and `eth_subscribe`-style
//!   subscriptions, pings and idle close, graceful shutdown; serves a
//!   `TcpListener` or a stream an HTTP server upgraded. Handlers find the
//!   opening handshake's headers as a `rpcwire::http::HeaderMap` extension.
//!   With `http` too, `server::combined` serves HTTP and WebSocket
//!   upgrades on one port, as geth and anvil do.
//! * `gateway`: what `examples/gateway` (an Ethereum gateway: a built-in
//!   chain, or a forwarding proxy in front of nodes) needs beyond `http`,
//!   `ws` and `eth`: hyper-util's pooled HTTP client, tokio-tungstenite's
//!   client, and alloy's transaction types (`alloy-consensus`,
//!   `alloy-eips`) for decoding and sender recovery.
//! * `eth`: the Ethereum toolkit (`eth`): QUANTITY / DATA / address / hash /
//!   block-id decoders over raw params, call-object and log-filter views,
//!   reply writers, geth's error codes, the method catalogue; adds
//!   alloy-primitives and const-hex.
//! * `mcp`: an MCP server layer (module `mcp`): the `initialize` lifecycle
//!   (revisions 2025-06-18, 2025-11-25) and the stateless 2026-07-28
//!   revision, tools whose arguments are checked against their JSON Schema
//!   (`jsonschema`), progress, cancellation, logging, over stdio and
//!   Streamable HTTP (hyper 1.x). Implies `server`.
//! * `peers`: not a library feature: the crates the benchmarks compare
//!   against (criterion, jsonrpsee, sonic-rs, simd-json, rmcp, ...), which
//!   some tests check agreement with. `--all-features` builds them.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]

pub mod codes;
mod conn;
mod de;
pub mod dispatch;
mod envelope;
mod error;
#[cfg(feature = "eth")]
#[cfg_attr(docsrs, doc(cfg(feature = "eth")))]
pub mod eth;
pub mod frame;
#[cfg(all(test, target_os = "linux"))]
mod guard_page;
pub mod json;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
pub mod message;
pub mod peer;
pub mod request;
pub mod response;
pub mod router;
mod scan;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub mod server;
mod write;

/// Fuzzing builds only (`--cfg fuzzing`, as `cargo fuzz` builds): turns
/// the kernels chosen by run-time CPU detection (AVX2) off, or back on,
/// for the whole process, so that the fuzz targets run the SSE2 paths of
/// CPUs without AVX2 on a host that has it.
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzzing_runtime_simd(on: bool) {
    scan::arch::set_runtime_simd(on);
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

pub use conn::{Connection, Context, ContextBuilder};
pub use dispatch::{Call, Dispatcher, RpcError};
pub use envelope::{Parser, parse, parse_response};
pub use error::{Category, Error};
pub use message::Status;
pub use request::Id;

/// Re-exported: the per-message arena type handlers see ([`Call::arena`]).
pub use bumpalo;
/// Re-exported: the shared byte buffers async handlers and transports use.
pub use bytes;
/// Re-exported (features `http` or `ws`): the HTTP types of `server::http`
/// and of the WebSocket handshake, such as the `http::HeaderMap` of the
/// request (or the opening handshake) that handlers find in their context.
/// An extension is looked up by its exact type, so a map asked for with
/// another version of the `http` crate is never found.
#[cfg(any(feature = "http", feature = "ws"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "http", feature = "ws"))))]
pub use http;

/// Locks `m`, taking the data of a poisoned lock as it is: the crate's
/// locks guard no invariant a panic could leave half made (none runs user
/// code while held), so a panic elsewhere must not turn into one here.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
