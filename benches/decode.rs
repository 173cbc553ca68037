//! Typed params decoding: serde_json reading the params in place, against
//! simd-json (which needs a mutable buffer: the params are copied into the
//! per-message arena, and its internal buffers are reused), on the params
//! of the large corpora of `support/corpus.rs`, shape by shape: every
//! `eth_call`, balance-style call and `eth_getLogs` filter of the mixed
//! Ethereum stream, every MCP `tools/call`, and the blob-carrying raw
//! transactions. Each iteration decodes the next params of the list (round
//! robin) and checks a digest of what it read. Groups named `hot/...` replay
//! the last 256 params of a list (the last one of the blobs), for comparison
//! only. The result decides
//! which decoder `Params::decode` uses.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::hint::black_box;
use std::time::Duration;

#[path = "support/corpus.rs"]
mod corpus;

/// A block parameter: a tag or number, or an EIP-1898 object.
#[derive(Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum Block<'a> {
    Tag(#[serde(borrow)] Cow<'a, str>),
    Hash {
        #[serde(borrow, rename = "blockHash")]
        block_hash: Cow<'a, str>,
    },
}

impl Block<'_> {
    fn len(&self) -> usize {
        match self {
            Block::Tag(t) => t.len(),
            Block::Hash { block_hash } => block_hash.len(),
        }
    }
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct CallObject<'a> {
    #[serde(borrow, default)]
    from: Option<Cow<'a, str>>,
    #[serde(borrow)]
    to: Cow<'a, str>,
    #[serde(borrow, default)]
    gas: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    value: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<Cow<'a, str>>,
}

/// One address or several; one topic or several.
#[derive(Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum OneOrMany<'a> {
    One(#[serde(borrow)] Cow<'a, str>),
    Many(#[serde(borrow)] Vec<Cow<'a, str>>),
}

impl OneOrMany<'_> {
    fn count(&self) -> usize {
        match self {
            OneOrMany::One(_) => 1,
            OneOrMany::Many(v) => v.len(),
        }
    }
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct LogFilter<'a> {
    #[serde(borrow, default, rename = "fromBlock")]
    from_block: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "toBlock")]
    to_block: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "blockHash")]
    block_hash: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    address: Option<OneOrMany<'a>>,
    #[serde(borrow, default)]
    topics: Vec<Option<OneOrMany<'a>>>,
}

/// `tools/call` params as an MCP server reads them before handing the
/// arguments to the tool (rmcp's `CallToolRequestParam`: a JSON object).
#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolCall<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The params of the messages of `msgs` whose method is one of `methods`.
fn params_of(msgs: &[Vec<u8>], methods: &[&str]) -> Vec<Vec<u8>> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        method: Cow<'a, str>,
        #[serde(borrow)]
        params: Option<&'a RawValue>,
    }
    msgs.iter()
        .filter_map(|m| {
            let e: Envelope = serde_json::from_slice(m).unwrap();
            let p = e.params?;
            methods
                .contains(&e.method.as_ref())
                .then(|| p.get().as_bytes().to_vec())
        })
        .collect()
}

/// Decodes each params of `list` as `$ty` with both decoders, round robin,
/// and checks `$sum` of the result against serde_json's.
macro_rules! case {
    ($c:expr, $label:expr, $list:expr, $ty:ty, $sum:expr) => {{
        let list: Vec<Vec<u8>> = $list;
        let sum = $sum;
        let want: Vec<usize> = list
            .iter()
            .map(|p| sum(&serde_json::from_slice::<$ty>(p).unwrap()))
            .collect();
        // The hot list: the last 256 params (the last one of a short list).
        let hot = list.len() - if list.len() > 1000 { 256 } else { 1 };
        for (group, list, want) in [
            (format!("decode/{}", $label), &list[..], &want[..]),
            (format!("decode/hot/{}", $label), &list[hot..], &want[hot..]),
        ] {
            let mut g = $c.benchmark_group(group);
            g.throughput(Throughput::Bytes((corpus::bytes(list) / list.len()) as u64));
            g.warm_up_time(Duration::from_secs(1));
            g.measurement_time(Duration::from_secs(2));
            g.sample_size(30);
            g.bench_function("serde_json", |b| {
                let mut i = 0;
                b.iter(|| {
                    let v: $ty = serde_json::from_slice(black_box(&list[i])).unwrap();
                    assert_eq!(sum(&v), want[i]);
                    i = (i + 1) % list.len();
                })
            });
            let mut arena = bumpalo::Bump::new();
            let mut buffers = simd_json::Buffers::default();
            g.bench_function("simd_json", |b| {
                let mut i = 0;
                b.iter(|| {
                    arena.reset();
                    let copy = arena.alloc_slice_copy(black_box(&list[i]));
                    let v: $ty =
                        simd_json::serde::from_slice_with_buffers(copy, &mut buffers).unwrap();
                    assert_eq!(sum(&v), want[i]);
                    i = (i + 1) % list.len();
                })
            });
            g.finish();
        }
    }};
}

fn bench_decode(c: &mut Criterion) {
    let stream = corpus::eth_stream(5, 20_000);
    case!(
        c,
        "eth_call",
        params_of(&stream, &["eth_call"]),
        (CallObject, Block),
        |v: &(CallObject, Block)| v.0.to.len()
            + v.0
                .data
                .as_ref()
                .or(v.0.input.as_ref())
                .map_or(0, |d| d.len())
            + v.1.len()
    );
    case!(
        c,
        "eth_getBalance_like",
        params_of(
            &stream,
            &["eth_getBalance", "eth_getCode", "eth_getTransactionCount"]
        ),
        (Cow<str>, Block),
        |v: &(Cow<str>, Block)| v.0.len() + v.1.len()
    );
    case!(
        c,
        "eth_getLogs",
        params_of(&stream, &["eth_getLogs"]),
        (LogFilter,),
        |v: &(LogFilter,)| v
            .0
            .topics
            .iter()
            .flatten()
            .map(OneOrMany::count)
            .sum::<usize>()
            + v.0.address.as_ref().map_or(0, OneOrMany::count)
    );
    let mcp = corpus::mcp_stream(6, 20_000);
    case!(
        c,
        "mcp_tools_call",
        params_of(&mcp, &["tools/call"]),
        ToolCall,
        |v: &ToolCall| v.name.len() + v.arguments.as_ref().map_or(0, |a| a.len())
    );
    case!(
        c,
        "eth_sendRawTransaction_128KiB",
        params_of(
            &corpus::eth_big_raw_txs(7, 128 * 1024, 32),
            &["eth_sendRawTransaction"]
        ),
        (Cow<str>,),
        |v: &(Cow<str>,)| v.0.len()
    );
}

criterion_group!(benches, bench_decode);
criterion_main!(benches);
