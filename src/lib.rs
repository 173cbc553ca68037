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
//! use rpcwire::{Call, Dispatcher};
//!
//! let d = Dispatcher::<u64>::builder()
//!     .method("eth_blockNumber", |call: Call<'_, u64>| Ok(call.reply.quantity((*call.state).into())))
//!     .build()?;
//! let (mut arena, mut out) = (bumpalo::Bump::new(), Vec::new());
//! d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#, &0x1b4, &mut arena, &mut out);
//! assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0x1b4"}"#);
//! # Ok::<(), rpcwire::RouterError>(())
//! ```
//!
//! The parser on its own:
//!
//! ```
//! use rpcwire::{Entry, Message};
//!
//! let arena = bumpalo::Bump::new();
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
//! * scan (private): byte-level JSON grammar. Its one SIMD kernel (finding
//!   the end of a run of string content) is chosen at run time: SSE2, then
//!   AVX2 for long strings when the CPU has it, on x86_64; NEON on aarch64;
//!   eight bytes at a time in a `u64` elsewhere.
//! * envelope: [`parse`], [`Parser`] (limits), [`Message`], [`Entry`],
//!   [`Batch`]; responses with [`parse_response`].
//! * views: [`Id`], [`Params`], [`RawValue`], [`JsonStr`].
//! * router: [`Router`], a perfect-hash table built once.
//! * dispatch: [`Dispatcher`], [`Call`], [`Reply`], [`RpcError`].
//! * [`frame`]: incremental framers for stream transports (newline, LSP
//!   `Content-Length`, concatenated JSON), no I/O.
//!
//! # What is accepted
//!
//! Exactly what `serde_json::from_slice::<&serde_json::value::RawValue>`
//! accepts (RFC 8259, UTF-8), apart from the nesting limit (default 128,
//! configurable with [`Parser::max_depth`]); the `differential` fuzz target
//! checks the agreement. Every edge case of the JSON-RPC 2.0 specification
//! is answered as [`Parser::parse`] and [`Dispatcher::handle`] describe.
//!
//! # Feature flags
//!
//! * `async`: async handlers ([`DispatcherBuilder::async_method`],
//!   `Dispatcher::handle_async`), runtime-agnostic; adds `bytes` and
//!   `futures-util`.
//! * `tokio`: the same, under the name users of tokio look for.
#![deny(
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]

mod dispatch;
#[cfg(feature = "async")]
mod dispatch_async;
mod envelope;
mod error;
pub mod frame;
mod response;
mod router;
mod scan;
mod value;
mod write;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

pub use dispatch::{
    Call, Dispatcher, DispatcherBuilder, Done, RESPONSE_TOO_LARGE, Reply, RpcError,
};
#[cfg(feature = "async")]
pub use dispatch_async::{AsyncCall, OwnedParams, RawJson};
pub use envelope::{Batch, Entry, InvalidRequest, Message, Parser, Request, parse};
pub use error::{
    Category, Error, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
};
pub use response::{ErrorObject, Response, ResponseBatch, ResponseMessage, parse_response};
pub use router::{Router, RouterError};
pub use value::{Id, JsonStr, Kind, Named, Params, Positional, RawValue};
