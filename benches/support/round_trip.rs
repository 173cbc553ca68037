//! The round trip's contestants (parse, route, run the handler, write the
//! reply), shared by `dispatch.rs` (criterion) and `interleaved.rs`: rpcwire's
//! dispatcher, and the two peers, each with the same methods doing the same
//! work (a hex quantity from the state and the length of the raw params):
//!
//! * (a) serde_json with `&RawValue` + `FxHashMap` + `serde_json::to_writer`,
//!   the hand-rolled shape a gateway writes today, in its fastest correct
//!   form: a batch is read into `Vec<Request>` in one pass, and only if that
//!   fails split into raw elements to answer each on its own;
//! * (b) jsonrpsee's `RpcModule` with the same methods registered, called as
//!   jsonrpsee's server calls it once a body is read (`RpcService::call`;
//!   a batch's replies joined by its `BatchResponseBuilder`).
//!
//! Each writes the quantity as its users would: rpcwire through its `eth`
//! writer (`EthReply::quantity`), the peers by returning alloy's `U64`, as
//! reth's jsonrpsee methods do (ruint serializes it from a stack buffer:
//! no heap, no `format!`; a `format!("0x{:x}")` per call, measured here
//! before, cost jsonrpsee an allocation its Ethereum users do not pay).
//! The parse and routing comparisons without the handlers are `--bench
//! parse` and `--bench router`.
#![allow(dead_code)]

use alloy_primitives::U64;
use rpcwire::eth::EthReply;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::corpus;

pub const STATE: u64 = 0x1234_5678;

pub fn rpcwire_dispatcher() -> rpcwire::Dispatcher<u64> {
    let mut b = rpcwire::Dispatcher::builder(STATE);
    for (name, _) in corpus::ETH_MIX {
        b = b.method(*name, |call: rpcwire::Call<'_, u64>| {
            let len = call.params.map_or(0, |p| p.as_bytes().len()) as u64;
            call.reply.quantity((*call.state + len) as u128)
        });
    }
    b.build().unwrap()
}

/// Peer (a): serde_json + FxHashMap + to_writer.
pub mod serde_fx {
    use super::*;

    #[derive(Deserialize)]
    pub struct Request<'a> {
        #[serde(borrow)]
        pub jsonrpc: &'a str,
        #[serde(borrow, default)]
        pub id: Option<&'a RawValue>,
        #[serde(borrow)]
        pub method: std::borrow::Cow<'a, str>,
        #[serde(borrow, default)]
        pub params: Option<&'a RawValue>,
    }

    #[derive(Serialize)]
    struct Response<'a> {
        jsonrpc: &'static str,
        id: &'a RawValue,
        result: U64,
    }

    #[derive(Serialize)]
    struct ErrorBody<'a> {
        code: i32,
        message: &'a str,
    }

    #[derive(Serialize)]
    struct ErrorResponse<'a> {
        jsonrpc: &'static str,
        id: Option<&'a RawValue>,
        error: ErrorBody<'a>,
    }

    pub type Handler = fn(Option<&RawValue>, &u64) -> U64;

    fn quantity(params: Option<&RawValue>, state: &u64) -> U64 {
        let len = params.map_or(0, |p| p.get().len()) as u64;
        U64::from(state + len)
    }

    pub fn methods() -> rustc_hash::FxHashMap<&'static str, Handler> {
        corpus::ETH_MIX
            .iter()
            .map(|(n, _)| (*n, quantity as Handler))
            .collect()
    }

    fn one(
        req: &Request<'_>,
        methods: &rustc_hash::FxHashMap<&'static str, Handler>,
        out: &mut Vec<u8>,
    ) {
        let Some(id) = req.id else { return };
        assert_eq!(req.jsonrpc, "2.0", "the corpus is valid");
        match methods.get(req.method.as_ref()) {
            Some(handler) => {
                serde_json::to_writer(
                    &mut *out,
                    &Response {
                        jsonrpc: "2.0",
                        id,
                        result: handler(req.params, &STATE),
                    },
                )
                .unwrap();
            }
            None => serde_json::to_writer(
                &mut *out,
                &ErrorResponse {
                    jsonrpc: "2.0",
                    id: Some(id),
                    error: ErrorBody {
                        code: -32601,
                        message: "Method not found",
                    },
                },
            )
            .unwrap(),
        }
    }

    pub fn handle(
        input: &[u8],
        methods: &rustc_hash::FxHashMap<&'static str, Handler>,
        out: &mut Vec<u8>,
    ) {
        let first = input.iter().find(|b| !b.is_ascii_whitespace()).copied();
        if first == Some(b'[') {
            out.push(b'[');
            // One pass when every entry is a request (all of this corpus)...
            if let Ok(requests) = serde_json::from_slice::<Vec<Request>>(input) {
                for (i, req) in requests.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    one(req, methods, out);
                }
            } else {
                // ...else entry by entry (the corpus never gets here).
                let elements: Vec<&RawValue> = serde_json::from_slice(input).unwrap();
                for (i, e) in elements.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    let req: Request = serde_json::from_str(e.get()).unwrap();
                    one(&req, methods, out);
                }
            }
            out.push(b']');
        } else {
            let req: Request = serde_json::from_slice(input).unwrap();
            one(&req, methods, out);
        }
    }
}

/// Peer (b): jsonrpsee's RpcModule.
pub mod jsonrpsee_module {
    use super::*;
    use jsonrpsee::RpcModule;
    use jsonrpsee::core::server::{BatchResponseBuilder, MethodCallback, MethodResponse};
    use jsonrpsee::types::{ErrorCode, ErrorObject, Params, Request};

    pub fn module() -> RpcModule<u64> {
        let mut m = RpcModule::new(STATE);
        for (name, _) in corpus::ETH_MIX {
            m.register_method(name, |params, state, _| {
                let len = params.as_str().map_or(0, str::len) as u64;
                // reth's shape: `RpcResult<U64>`.
                Ok::<_, jsonrpsee::types::ErrorObjectOwned>(U64::from(state + len))
            })
            .unwrap();
        }
        m
    }

    /// jsonrpsee-server's default response size limit (10 MiB).
    const MAX_RESPONSE: usize = 10 * 1024 * 1024;

    /// What jsonrpsee's server does with a request body once read
    /// (`handle_rpc_call`, then `RpcService::call` for each request, and a
    /// `BatchResponseBuilder` for a batch), without its HTTP and tower
    /// layers: a request is read into `jsonrpsee::types::Request`, its
    /// method looked up by name, its synchronous callback called.
    /// (`RpcModule::raw_json_request`, measured here before, is a test
    /// helper that also makes a channel and a subscription permit per call.)
    pub fn handle(m: &RpcModule<u64>, input: &[u8], out: &mut Vec<u8>) {
        let first = input.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'[') {
            let unchecked: Vec<&RawValue> = serde_json::from_slice(input).unwrap();
            let mut batch = Vec::with_capacity(unchecked.len());
            for call in unchecked {
                batch.push(serde_json::from_str::<Request>(call.get()).unwrap());
            }
            let mut builder = BatchResponseBuilder::new_with_limit(MAX_RESPONSE);
            for req in batch {
                builder.append(call(m, req)).unwrap();
            }
            let reply = MethodResponse::from_batch(builder.finish());
            out.extend_from_slice(reply.as_json().get().as_bytes());
        } else {
            let req: Request = serde_json::from_slice(input).unwrap();
            out.extend_from_slice(call(m, req).as_json().get().as_bytes());
        }
    }

    fn call(m: &RpcModule<u64>, req: Request<'_>) -> MethodResponse {
        let Request {
            id,
            method,
            params,
            extensions,
            ..
        } = req;
        let params = Params::new(params.as_ref().map(|p| p.get()));
        match m.method_with_name(&method) {
            Some((_, MethodCallback::Sync(callback))) => {
                callback(id, params, MAX_RESPONSE, extensions)
            }
            None => MethodResponse::error(id, ErrorObject::from(ErrorCode::MethodNotFound)),
            Some(_) => unreachable!("only synchronous methods are registered"),
        }
    }
}
