//! Typed params decoding: serde_json reading the params in place, against
//! simd-json (which needs a mutable buffer: the params are copied into the
//! per-message arena, and its internal buffers are reused), across the sizes
//! of real params. The result decides which decoder `Params::decode` uses.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde::Deserialize;
use std::hint::black_box;

#[path = "support/corpus.rs"]
mod corpus;

#[derive(Deserialize)]
#[allow(dead_code)]
struct CallObject<'a> {
    #[serde(borrow, default)]
    from: Option<&'a str>,
    #[serde(borrow)]
    to: &'a str,
    #[serde(borrow, default)]
    data: Option<&'a str>,
    #[serde(borrow, default)]
    value: Option<&'a str>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct LogFilter<'a> {
    #[serde(borrow, rename = "fromBlock")]
    from_block: &'a str,
    #[serde(borrow, rename = "toBlock")]
    to_block: &'a str,
    #[serde(borrow)]
    address: &'a str,
    #[serde(borrow)]
    topics: Vec<Option<&'a str>>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolCall<'a> {
    #[serde(borrow)]
    name: &'a str,
    #[serde(borrow)]
    arguments: std::collections::BTreeMap<&'a str, &'a str>,
}

/// Decodes `params` as `T` with both decoders and returns a checksum.
macro_rules! case {
    ($g:expr, $label:expr, $params:expr, $ty:ty, $sum:expr) => {{
        let params: Vec<u8> = $params;
        $g.throughput(Throughput::Bytes(params.len() as u64));
        let sum = $sum;
        let want = sum(&serde_json::from_slice::<$ty>(&params).unwrap());
        $g.bench_function(format!("serde_json/{}", $label), |b| {
            b.iter(|| {
                let v: $ty = serde_json::from_slice(black_box(&params)).unwrap();
                assert_eq!(sum(&v), want);
            })
        });
        let mut arena = bumpalo::Bump::new();
        let mut buffers = simd_json::Buffers::default();
        $g.bench_function(format!("simd_json/{}", $label), |b| {
            b.iter(|| {
                arena.reset();
                let copy = arena.alloc_slice_copy(black_box(&params));
                let v: $ty = simd_json::serde::from_slice_with_buffers(copy, &mut buffers).unwrap();
                assert_eq!(sum(&v), want);
            })
        });
    }};
}

/// The `params` member of a message.
fn params_of(msg: &[u8]) -> Vec<u8> {
    let v: serde_json::Value = serde_json::from_slice(msg).unwrap();
    serde_json::to_vec(&v["params"]).unwrap()
}

fn bench_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    let mut rng = corpus::Rng::new(5);
    let balance = format!(r#"["{}","latest"]"#, rng.address());
    case!(
        g,
        "eth_getBalance_60B",
        balance.into_bytes(),
        (&str, &str),
        |v: &(&str, &str)| v.0.len() + v.1.len()
    );
    let call = format!(
        r#"[{{"from":"{}","to":"{}","data":"{}"}},"latest"]"#,
        rng.address(),
        rng.address(),
        rng.hex(8 + 64 * 3)
    );
    case!(
        g,
        "eth_call_330B",
        call.into_bytes(),
        (CallObject, &str),
        |v: &(CallObject, &str)| v.0.to.len() + v.0.data.map_or(0, str::len)
    );
    let logs = format!(
        r#"[{{"fromBlock":"0x1312d00","toBlock":"0x1313500","address":"{}","topics":["{}",null,"{}"]}}]"#,
        rng.address(),
        rng.hash(),
        rng.hash()
    );
    case!(
        g,
        "eth_getLogs_280B",
        logs.into_bytes(),
        (LogFilter,),
        |v: &(LogFilter,)| v.0.topics.len() + v.0.address.len()
    );
    let mcp = br#"{"name":"get_weather","arguments":{"location":"San Francisco, CA","units":"metric"},"_meta":{"progressToken":2}}"#.to_vec();
    case!(g, "mcp_tools_call", mcp, ToolCall, |v: &ToolCall| v
        .name
        .len()
        + v.arguments.len());
    let raw = format!(r#"["{}"]"#, rng.hex(1000));
    case!(
        g,
        "eth_sendRawTransaction_1KB",
        raw.into_bytes(),
        (&str,),
        |v: &(&str,)| v.0.len()
    );
    let blob = params_of(&corpus::eth_big_raw_tx(7, 128 * 1024));
    case!(g, "eth_sendRawTransaction_128KiB", blob, (&str,), |v: &(
        &str,
    )| v
        .0
        .len());
    let many: Vec<String> = (0..2000).map(|_| rng.hash()).collect();
    let many = serde_json::to_vec(&(many,)).unwrap();
    case!(g, "hash_list_136KiB", many, (Vec<&str>,), |v: &(
        Vec<&str>,
    )| v.0.len());
    g.finish();
}

criterion_group!(benches, bench_decode);
criterion_main!(benches);
