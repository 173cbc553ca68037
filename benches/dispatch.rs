//! The whole round trip (parse, route, run the handler, write the reply) on
//! the Ethereum corpora of `support/corpus.rs` (the mixed single-request
//! stream, batches of 100 and of 1000), against:
//!
//! * (a) serde_json with `&RawValue` + `FxHashMap` + `serde_json::to_writer`,
//!   the hand-rolled shape a gateway writes today, in its fastest correct
//!   form: a batch is read into `Vec<Request>` in one pass, and only if that
//!   fails split into raw elements to answer each on its own;
//! * (b) jsonrpsee's `RpcModule::raw_json_request` with the same methods
//!   registered (a batch is split into its elements, each sent through
//!   `raw_json_request`, and the replies joined, as jsonrpsee's server does).
//!
//! Every handler does the same work: answer a hex quantity computed from the
//! state and the length of the raw params. The replies of all three are
//! checked to be the same JSON before measuring. Each iteration handles the
//! next message of the corpus (round robin) and checks the length of its
//! reply. Groups named `hot/...` replay a small corpus, for comparison only.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rpcwire::eth::EthReply;
use std::hint::black_box;
use std::time::Duration;

#[path = "support/corpus.rs"]
mod corpus;

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
            out.push(b'[');
            // One pass when every entry is a request (all of this corpus)...
            if let Ok(requests) = serde_json::from_slice::<Vec<Request>>(input) {
                for (i, req) in requests.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    one(req, methods, scratch, out);
                }
            } else {
                // ...else entry by entry (the corpus never gets here).
                let elements: Vec<&RawValue> = serde_json::from_slice(input).unwrap();
                for (i, e) in elements.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    let req: Request = serde_json::from_str(e.get()).unwrap();
                    one(&req, methods, scratch, out);
                }
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

/// Polls a future that completes without waiting (jsonrpsee answers a
/// synchronous method without I/O), so no runtime's `block_on` is measured
/// with it.
fn ready<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("a synchronous method completes at once"),
    }
}

/// Runs `f` on message `i`, `i + 1`, ... of `msgs` (wrapping), one per
/// iteration, checking the length of each reply against `expect`.
fn round_robin<'a>(
    msgs: &'a [Vec<u8>],
    expect: &'a [usize],
    mut f: impl FnMut(&[u8], &mut Vec<u8>) + 'a,
) -> impl FnMut() + 'a {
    let mut i = 0;
    let mut out = Vec::with_capacity(1 << 20);
    move || {
        out.clear();
        f(black_box(&msgs[i]), &mut out);
        assert_eq!(out.len(), expect[i], "message {i}");
        i += 1;
        if i == msgs.len() {
            i = 0;
        }
    }
}

fn bench_round_trip(c: &mut Criterion) {
    let singles = corpus::eth_stream(31, 20_000);
    let b100 = corpus::eth_batches(37, 100, 200);
    let b1000 = corpus::eth_batches(41, 1000, 20);
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("hot/eth_singles", corpus::hot(&singles, 256)),
        ("hot/eth_batch_100", corpus::hot(&b100, 3)),
        ("hot/eth_batch_1000", corpus::hot(&b1000, 1)),
        ("eth_singles", singles),
        ("eth_batch_100", b100),
        ("eth_batch_1000", b1000),
    ];

    let d = rpcwire_dispatcher();
    let fx = serde_fx::methods();
    let module = jsonrpsee_module::module();

    for (name, msgs) in &cases {
        // Every implementation must produce the same replies, as JSON; each
        // one's reply lengths are checked while measuring.
        let mut arena = rpcwire::Connection::new();
        let (mut ours, mut theirs, mut rpsee) = (Vec::new(), Vec::new(), Vec::new());
        for m in msgs {
            let mut a = Vec::new();
            d.handle(m, &mut arena, &mut a);
            let mut b = Vec::new();
            serde_fx::handle(m, &fx, &mut String::new(), &mut b);
            let mut c = Vec::new();
            ready(jsonrpsee_module::handle(&module, m, &mut c));
            let a_json: serde_json::Value = serde_json::from_slice(&a).unwrap();
            assert_eq!(
                a_json,
                serde_json::from_slice::<serde_json::Value>(&b).unwrap()
            );
            assert_eq!(
                a_json,
                serde_json::from_slice::<serde_json::Value>(&c).unwrap()
            );
            ours.push(a.len());
            theirs.push(b.len());
            rpsee.push(c.len());
        }

        let mut g = c.benchmark_group(format!("round_trip/{name}"));
        g.throughput(Throughput::Bytes((corpus::bytes(msgs) / msgs.len()) as u64));
        g.warm_up_time(Duration::from_millis(500));
        g.measurement_time(Duration::from_secs(2));
        g.sample_size(if name.contains("batch") { 30 } else { 50 });
        g.bench_function("rpcwire", |b| {
            b.iter(round_robin(msgs, &ours, |m, out| {
                d.handle(m, &mut arena, out);
            }))
        });
        let mut scratch = String::new();
        g.bench_function("serde_json_fxhashmap", |b| {
            b.iter(round_robin(msgs, &theirs, |m, out| {
                serde_fx::handle(m, &fx, &mut scratch, out)
            }))
        });
        g.bench_function("jsonrpsee_raw_json_request", |b| {
            b.iter(round_robin(msgs, &rpsee, |m, out| {
                ready(jsonrpsee_module::handle(&module, m, out))
            }))
        });
        g.finish();
    }
}

criterion_group!(benches, bench_round_trip);
criterion_main!(benches);
