//! The Ethereum toolkit (feature `eth`): decoders straight from raw params,
//! reply writers, geth's error codes and the method catalogue.
//!
//! Params stay raw until a handler reads them, and this layer reads them
//! in place: a QUANTITY becomes a `u64`, `u128` or [`U256`], DATA a
//! borrowed [`Hex`] or a fixed array ([`Address`], [`B256`]), a block
//! parameter a [`BlockId`], and the call object and the log filter become
//! borrowed views ([`CallRequest`], [`LogFilter`]) whose members are
//! decoded on request. Nothing allocates (DATA decodes into the
//! per-message arena), and every rule of the execution API is enforced,
//! with geth's readings where it is looser (its hexutil takes a `0X`
//! prefix, and an empty string as a QUANTITY's zero or DATA's no bytes):
//!
//! | value | accepted | refused (reason) |
//! | --- | --- | --- |
//! | QUANTITY | `0x0`, `0x1b4`, `0xDEAD`, `0X1b4`, `""` (zero) | `0x` (empty), `0x01` (leading zeros), `1b4` (missing prefix), `0xg` (invalid digit), 17 digits into `u64` / 65 into `U256` (more than N bits), `27` (not a string) |
//! | DATA | `0x`, `0x00ff`, `0X00ff`, `""` (no bytes) | `0xabc` (odd number of digits), a 19-byte address (wrong length), `""` for an address or a hash |
//! | block id | `latest` and the other tags, `0x10`, a 66-character hash, `{"blockHash":…,"requireCanonical":true}`, `{"blockNumber":…}` | `Latest`, `""`, `{"blockHash":…,"blockNumber":…}` |
//!
//! A refusal is [`Invalid`]: with `?` in a handler it becomes -32602 with
//! `data` naming the parameter, e.g.
//! `{"param":"blockNumber","position":1,"reason":"leading zeros","received":"0x01"}`.
//!
//! ```
//! use rpcwire::eth::{BlockId, BlockTag, EthParams, EthReply};
//! use rpcwire::{Call, Connection, Dispatcher};
//!
//! let d = Dispatcher::builder(())
//!     .method("eth_getBalance", |call: Call<'_, ()>| {
//!         let mut p = EthParams::new(call.params);
//!         let address = p.required("address")?.address()?;
//!         let block = match p.optional("blockNumber") {
//!             Some(b) => b.block_id()?,
//!             None => BlockId::Tag(BlockTag::Latest),
//!         };
//!         p.finish()?;
//!         let wei = if block == BlockId::Tag(BlockTag::Latest) { address[19] as u128 } else { 0 };
//!         EthReply::quantity(call.reply, wei)
//!     })
//!     .build()?;
//! let (mut conn, mut out) = (Connection::new(), Vec::new());
//! d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x00000000000000000000000000000000000000ff","latest"]}"#, &mut conn, &mut out);
//! assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0xff"}"#);
//!
//! out.clear();
//! d.handle(br#"{"jsonrpc":"2.0","id":2,"method":"eth_getBalance","params":["0x00000000000000000000000000000000000000ff","0x01"]}"#, &mut conn, &mut out);
//! assert_eq!(
//!     String::from_utf8(out)?,
//!     r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Invalid params","data":{"param":"blockNumber","position":1,"reason":"leading zeros","received":"0x01"}}}"#
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! * Decoders: [`EthValue`] (on any [`RawJson`](crate::json::RawJson)),
//!   [`EthParams`] and [`Param`] (positional params with names for the
//!   errors), [`Hex`], [`BlockId`], [`BlockNumberOrTag`], [`BlockTag`],
//!   [`CallRequest`], [`LogFilter`] (with [`Addresses`], [`Topics`],
//!   [`TopicFilter`], [`TopicSet`]), [`Invalid`].
//! * Writers: [`mod@write`] (into any [`ReplyBuf`](crate::dispatch::ReplyBuf))
//!   and [`EthReply`] (into a handler's [`Reply`](crate::dispatch::Reply)).
//! * [`codes`]: geth's server errors (-32000, -32002, -32003, and 3 for
//!   reverts with their output).
//! * [`catalogue`]: the standard methods, their block parameter and
//!   whether their results can be cached.
//!
//! Hex is decoded and encoded by const-hex (SIMD, chosen at run time),
//! except QUANTITY parsing, which folds eight digits at a time in a `u64`
//! (faster for such short strings), DATA of 16 to 64 digits on x86_64
//! (addresses and hashes by an AVX2 decoder when the CPU has it, else and
//! below 32 digits by an inlined SSE2 one; see the `hex` group of
//! `benches/eth_decode.rs`), and longer DATA decoded into an arena on
//! x86_64 with AVX2 (call data, signed transactions), which an AVX2
//! decoder writes straight into the arena's fresh bytes.

mod block;
mod call;
pub mod catalogue;
pub mod codes;
mod decode;
mod filter;
mod hex;
mod walk;
pub mod write;

pub use alloy_primitives::{Address, B256, Bytes, U256};
pub use block::{BlockId, BlockNumberOrTag, BlockTag};
pub use call::CallRequest;
pub use decode::{EthParams, EthValue, Hex, Invalid, Param};
pub use filter::{Addresses, LogFilter, TopicFilter, TopicSet, Topics};
pub use write::EthReply;
