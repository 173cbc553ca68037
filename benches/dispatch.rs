//! The whole round trip (parse, route, run the handler, write the reply) on
//! the Ethereum corpus, single requests and batches, against:
//!
//! * (a) serde_json with `&RawValue` + `FxHashMap` + `serde_json::to_writer`,
//!   the hand-rolled shape a gateway writes today;
//! * (b) jsonrpsee's `RpcModule::raw_json_request` with the same methods
//!   registered (a batch is split into its elements, each sent through
//!   `raw_json_request`, and the replies joined, as jsonrpsee's server does).
//!
//! Every handler does the same work: answer a hex quantity computed from the
//! state and the length of the raw params. Each iteration checks the reply
//! size against the expected total, so nothing is optimised away.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

#[path = "support/corpus.rs"]
mod corpus;

use corpus::Style;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

const STATE: u64 = 0x1234_5678;

fn rpcwire_dispatcher() -> rpcwire::Dispatcher<u64> {
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
mod serde_fx {
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
        result: &'a str,
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

    pub type Handler = fn(Option<&RawValue>, &u64, &mut String);

    fn quantity(params: Option<&RawValue>, state: &u64, out: &mut String) {
        use std::fmt::Write;
        let len = params.map_or(0, |p| p.get().len()) as u64;
        let _ = write!(out, "0x{:x}", state + len);
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
        scratch: &mut String,
        out: &mut Vec<u8>,
    ) {
        let Some(id) = req.id else { return };
        assert_eq!(req.jsonrpc, "2.0", "the corpus is valid");
        match methods.get(req.method.as_ref()) {
            Some(handler) => {
                scratch.clear();
                handler(req.params, &STATE, scratch);
                serde_json::to_writer(
                    &mut *out,
                    &Response {
                        jsonrpc: "2.0",
                        id,
                        result: scratch,
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
        scratch: &mut String,
        out: &mut Vec<u8>,
    ) {
        let first = input.iter().find(|b| !b.is_ascii_whitespace()).copied();
        if first == Some(b'[') {
            let elements: Vec<&RawValue> = serde_json::from_slice(input).unwrap();
            out.push(b'[');
            for (i, e) in elements.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let req: Request = serde_json::from_str(e.get()).unwrap();
                one(&req, methods, scratch, out);
            }
            out.push(b']');
        } else {
            let req: Request = serde_json::from_slice(input).unwrap();
            one(&req, methods, scratch, out);
        }
    }
}

/// Peer (b): jsonrpsee's RpcModule.
mod jsonrpsee_module {
    use super::*;
    use jsonrpsee::RpcModule;

    pub fn module() -> RpcModule<u64> {
        let mut m = RpcModule::new(STATE);
        for (name, _) in corpus::ETH_MIX {
            m.register_method(name, |params, state, _| {
                let len = params.as_str().map_or(0, str::len) as u64;
                format!("0x{:x}", state + len)
            })
            .unwrap();
        }
        m
    }

    pub async fn handle(m: &RpcModule<u64>, input: &[u8], out: &mut Vec<u8>) {
        let text = std::str::from_utf8(input).unwrap();
        if text.trim_start().starts_with('[') {
            let elements: Vec<&RawValue> = serde_json::from_str(text).unwrap();
            out.push(b'[');
            for (i, e) in elements.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let (reply, _rx) = m.raw_json_request(e.get(), 1).await.unwrap();
                out.extend_from_slice(reply.get().as_bytes());
            }
            out.push(b']');
        } else {
            let (reply, _rx) = m.raw_json_request(text, 1).await.unwrap();
            out.extend_from_slice(reply.get().as_bytes());
        }
    }
}

fn bench_round_trip(c: &mut Criterion) {
    let mut singles = Vec::new();
    for style in [Style::Viem, Style::Ethers, Style::Web3Py] {
        singles.extend(corpus::eth_singles(31, style, 100));
    }
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("round_trip/eth_single", singles),
        (
            "round_trip/eth_batch_100",
            vec![corpus::eth_batch(37, Style::Ethers, 100)],
        ),
        (
            "round_trip/eth_batch_1000",
            vec![corpus::eth_batch(41, Style::Viem, 1000)],
        ),
    ];

    let d = rpcwire_dispatcher();
    let fx = serde_fx::methods();
    let module = jsonrpsee_module::module();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();

    for (name, msgs) in &cases {
        // Every implementation must produce the same replies, as JSON.
        let mut arena = rpcwire::Connection::new();
        let mut expected_len = 0;
        for m in msgs {
            let mut ours = Vec::new();
            d.handle(m, &mut arena, &mut ours);
            let mut theirs = Vec::new();
            serde_fx::handle(m, &fx, &mut String::new(), &mut theirs);
            let mut rpsee = Vec::new();
            rt.block_on(jsonrpsee_module::handle(&module, m, &mut rpsee));
            let a: serde_json::Value = serde_json::from_slice(&ours).unwrap();
            assert_eq!(
                a,
                serde_json::from_slice::<serde_json::Value>(&theirs).unwrap()
            );
            assert_eq!(
                a,
                serde_json::from_slice::<serde_json::Value>(&rpsee).unwrap()
            );
            expected_len += ours.len();
        }

        let bytes: usize = msgs.iter().map(Vec::len).sum();
        let mut g = c.benchmark_group(*name);
        g.throughput(Throughput::Bytes(bytes as u64));
        let mut out = Vec::with_capacity(1 << 20);
        g.bench_function("rpcwire", |b| {
            b.iter(|| {
                let mut total = 0;
                for m in msgs {
                    out.clear();
                    d.handle(black_box(m), &mut arena, &mut out);
                    total += out.len();
                }
                assert_eq!(total, expected_len);
            })
        });
        let mut scratch = String::new();
        g.bench_function("serde_json_fxhashmap", |b| {
            b.iter(|| {
                let mut total = 0;
                for m in msgs {
                    out.clear();
                    serde_fx::handle(black_box(m), &fx, &mut scratch, &mut out);
                    total += out.len();
                }
                assert!(total > 0);
            })
        });
        g.bench_function("jsonrpsee_raw_json_request", |b| {
            b.iter(|| {
                rt.block_on(async {
                    let mut total = 0;
                    for m in msgs {
                        out.clear();
                        jsonrpsee_module::handle(&module, black_box(m), &mut out).await;
                        total += out.len();
                    }
                    assert!(total > 0);
                })
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench_round_trip);
criterion_main!(benches);
