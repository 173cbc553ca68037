//! What a synchronous handler receives: [`Call`].

use std::cell::Cell;

use bumpalo::Bump;
use serde::Deserialize;

use super::error::RpcError;
use super::reply::Reply;
use crate::conn::Context;
use crate::json::RawJson;
use crate::request::{Id, Params};

/// Everything a handler receives for one request.
///
/// ```
/// use rpcwire::{Call, Connection, Dispatcher};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Greeting<'a> {
///     #[serde(borrow)]
///     name: &'a str, // borrowed from the message, escaped or not
/// }
///
/// let d = Dispatcher::builder(())
///     .method("hello", |call: Call<'_, ()>| {
///         let (g,): (Greeting,) = call.decode()?;
///         Ok::<_, rpcwire::RpcError>(format!("hello, {}", g.name))
///     })
///     .build()?;
/// let (mut conn, mut out) = (Connection::new(), Vec::new());
/// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"hello","params":[{"name":"Ad\u00e8le"}]}"#, &mut conn, &mut out);
/// assert_eq!(out, r#"{"jsonrpc":"2.0","id":1,"result":"hello, Adèle"}"#.as_bytes());
/// # Ok::<(), rpcwire::router::BuildError>(())
/// ```
pub struct Call<'a, S> {
    /// The params, raw until decoded; `None` when absent or `null`.
    pub params: Option<Params<'a>>,
    /// The per-message arena, reset between messages.
    pub arena: &'a Bump,
    /// The dispatcher's state.
    pub state: &'a S,
    /// The connection the request came from.
    pub ctx: &'a Context,
    /// Where the result goes, for handlers that write it themselves.
    pub reply: Reply<'a>,
    pub(crate) method: &'a str,
    pub(crate) id: Option<Id<'a>>,
    /// The whole message, for error offsets.
    pub(crate) message: &'a [u8],
    positional: Cell<Option<&'a [RawJson<'a>]>>,
}

/// A call's parts but its reply: what the dispatcher hands the erased
/// handler, which makes the [`Call`] (and, after the handler returns, a
/// second [`Reply`] for the value it returned).
pub(crate) struct Invocation<'a, S> {
    pub(crate) params: Option<Params<'a>>,
    pub(crate) arena: &'a Bump,
    pub(crate) state: &'a S,
    pub(crate) ctx: &'a Context,
    pub(crate) method: &'a str,
    pub(crate) id: Option<Id<'a>>,
    pub(crate) message: &'a [u8],
}

impl<'a, S> Invocation<'a, S> {
    #[inline(always)]
    pub(crate) fn into_call(self, reply: Reply<'a>) -> Call<'a, S> {
        Call {
            params: self.params,
            arena: self.arena,
            state: self.state,
            ctx: self.ctx,
            reply,
            method: self.method,
            id: self.id,
            message: self.message,
            positional: Cell::new(None),
        }
    }
}

impl<'a, S> Call<'a, S> {
    /// The method name.
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The request id; `None` for a notification (whose result is
    /// discarded).
    pub fn id(&self) -> Option<Id<'a>> {
        self.id
    }

    /// The `i`th positional param (from 0). The first call indexes every
    /// positional value into the arena in one walk; each call after is
    /// O(1), so looping over the params is linear.
    pub fn param(&self, i: usize) -> Option<RawJson<'a>> {
        let values = match self.positional.get() {
            Some(v) => v,
            None => {
                let v = self.params.map_or(&[][..], |p| p.positional_in(self.arena));
                self.positional.set(Some(v));
                v
            }
        };
        values.get(i).copied()
    }

    /// Decodes the params into `T`.
    ///
    /// `T` may borrow from the message: `&'a str` fields (with
    /// `#[serde(borrow)]`) work for every string, escaped or not (escaped
    /// ones are decoded into the per-message arena), and `&RawValue` keeps a
    /// value raw. Absent params (or `"params": null`) decode as `[]`, so
    /// `()`, `Vec<_>` and all-optional tuples accept a call without params
    /// (`()` takes `{}` too), but an `Option` as the whole params is
    /// `None` then (as serde_json reads `null`) and a map (or a struct
    /// with `#[serde(flatten)]`) is empty. A tuple's trailing values may
    /// be left out, as geth reads optional arguments: they read as `null`, so an `Option` is `None`
    /// and a required one is "invalid length". A struct takes named params
    /// (`{"name": …}`) and positional ones (`["ada"]`, its fields in order)
    /// alike, the positional ones read as a tuple's (trailing `Option` and
    /// `#[serde(default)]` fields may be left out). A newtype struct
    /// around the params (`struct P((u64, Option<u64>))`) reads them by
    /// these rules too. A field left out of
    /// positional params whose type takes `null` (an `Option`, a
    /// `serde_json::Value`) reads that `null`, not its
    /// `#[serde(default = …)]`: give such a default to a type that does not
    /// take `null`, or send the params by name. A failure is -32602 with
    /// serde's reason and the byte offset in the message in `data`: where
    /// decoding stopped, at the last byte of a value of the wrong type (an
    /// array's or object's opening bracket) or where the syntax broke
    /// (serde_json's position).
    ///
    /// ```
    /// use rpcwire::{Call, Connection, Dispatcher, RpcError};
    /// let d = Dispatcher::builder(())
    ///     .method("eth_blockNumber", |call: Call<'_, ()>| {
    ///         let () = call.decode()?;
    ///         call.reply.str("0x1b4")
    ///     })
    ///     .method("eth_getBalance", |call: Call<'_, ()>| {
    ///         let (address, block): (&str, Option<&str>) = call.decode()?;
    ///         Ok::<_, RpcError>(format!("{address} at {}", block.unwrap_or("latest")))
    ///     })
    ///     .build()?;
    /// let (mut conn, mut out) = (Connection::new(), Vec::new());
    /// for (params, result) in [("", "\"0x1b4\""), (r#","params":[]"#, "\"0x1b4\"")] {
    ///     out.clear();
    ///     let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"{params}}}"#);
    ///     d.handle(msg.as_bytes(), &mut conn, &mut out);
    ///     assert_eq!(out, format!(r#"{{"jsonrpc":"2.0","id":1,"result":{result}}}"#).as_bytes());
    /// }
    /// out.clear();
    /// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0xab"]}"#, &mut conn, &mut out);
    /// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0xab at latest"}"#);
    /// # Ok::<(), rpcwire::router::BuildError>(())
    /// ```
    pub fn decode<T: Deserialize<'a>>(&self) -> Result<T, RpcError> {
        let Some(params) = self.params else {
            return crate::de::absent().map_err(|e| params_error(&e, None));
        };
        let json = params.as_bytes();
        crate::de::from_slice_in(json, self.arena).map_err(|e| {
            // No offset for params a handler put there from elsewhere
            // (`params` is a public field): they are not in the message.
            let offset = (json.as_ptr() as usize)
                .checked_sub(self.message.as_ptr() as usize)
                .filter(|&base| base < self.message.len())
                .map(|base| base + crate::de::error_offset(json, &e));
            params_error(&e, offset)
        })
    }
}

/// -32602 for a decoding failure: serde's reason without its position in
/// the params (which the client never wrote), and the offset in the message.
pub(crate) fn params_error(e: &serde_json::Error, offset: Option<usize>) -> RpcError {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let reason = text.strip_suffix(&suffix).unwrap_or(&text);
    RpcError::params(reason, offset)
}

impl<'a> Params<'a> {
    /// Decodes the params into `T` with serde_json, borrowing from the
    /// message where `T` borrows (strings without escapes; see
    /// [`decode_in`](Params::decode_in) for every string). The params as a
    /// whole read as for [`Call::decode`](crate::Call::decode): `()` takes
    /// `[]`, a tuple's missing trailing values read as `null`. A failure is
    /// -32602 with serde's reason in `data` (no offset: a view does not
    /// know where its message starts; [`Call::decode`](crate::Call::decode)
    /// gives one). A `&str` field given a string written with escapes,
    /// which only [`decode_in`](Params::decode_in) can lend, is the
    /// handler's error, not the client's: -32603, `data.reason` saying so.
    /// Where serde words the failure its own way (a `&str` inside a
    /// `#[serde(untagged)]` enum: "data did not match any variant"), it is
    /// not told apart, and the answer is -32602: decode types that borrow
    /// with [`decode_in`](Params::decode_in) or
    /// [`Call::decode`](crate::Call::decode).
    ///
    /// serde_json reads the params in place, at every size. simd-json was
    /// measured against it (`cargo bench --features peers --bench decode`; simd-json needs a
    /// mutable buffer, so the params are copied into the arena, its buffers
    /// reused): serde_json was faster for `eth_getBalance` (60 B, 64 vs
    /// 102 ns), `eth_call` (330 B, 222 vs 257 ns), an MCP `tools/call`,
    /// a 1 KB raw transaction (185 vs 278 ns), a 128 KiB one (23 vs 36 µs)
    /// and a list of 2000 hashes (136 KiB, 66 vs 74 µs), and level on an
    /// `eth_getLogs` filter.
    pub fn decode<T: Deserialize<'a>>(&self) -> Result<T, RpcError> {
        crate::de::from_slice(self.as_bytes()).map_err(|e| {
            if only_lent_for_a_moment(&e.to_string()) {
                return RpcError::internal_because(
                    "the handler decoded a `&str` from a string with escapes without an \
                     arena (Params::decode); decode with Call::decode or Params::decode_in",
                );
            }
            params_error(&e, None)
        })
    }

    /// Decodes the params into `T`, lending strings with escapes from
    /// `arena` so that `&'a str` fields work for every string.
    pub fn decode_in<T: Deserialize<'a>>(&self, arena: &'a Bump) -> Result<T, RpcError> {
        crate::de::from_slice_in(self.as_bytes(), arena).map_err(|e| params_error(&e, None))
    }
}

/// Whether `message` is serde's for a valid string that serde_json could
/// only lend for a moment (it had escapes) where a `&str` was wanted:
/// `invalid type: string "…", expected a borrowed string`, the string
/// written with Rust's escapes. The client's params were fine then. The
/// quoted string is the client's and is read to its closing quote, so
/// that a string that merely says "expected a borrowed string" (a client's
/// `["expected a borrowed string"]` into a number) stays the client's
/// error.
fn only_lent_for_a_moment(message: &str) -> bool {
    // A `&[u8]` given a string with escapes (JSON has no byte arrays: no
    // client can send what serde calls one).
    if message.starts_with("invalid type: byte array, expected a borrowed byte array") {
        return true;
    }
    let Some(quoted) = message.strip_prefix("invalid type: string \"") else {
        return false;
    };
    let mut chars = quoted.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '"' => {
                return quoted[at + 1..].starts_with(", expected a borrowed string");
            }
            _ => {}
        }
    }
    false
}
