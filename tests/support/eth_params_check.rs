//! The `eth_params` fuzz target's check, also run by `tests/fuzz_corpus.rs`:
//! any bytes, as a request's params, read through the `eth` layer's fused
//! readers (`next_log_filter`, `next_call_request`, `next_block_id`,
//! `next_address`, `next_hash`, `next_bytes_in`, which find a value's end
//! as they decode it) and through its general ones (`required(..)` or
//! `optional(..)`, then the value's decoder) give the same values, the same
//! refusals and the same position for what follows; nothing panics.

use std::fmt::Debug;

use rpcwire::eth::{CallRequest, EthParams, Invalid, LogFilter, TopicFilter};
use rpcwire::request::Params;

/// A decoded value or the refusal's text, comparable across the readers.
type Read<T> = Result<T, String>;

fn read<T>(r: Result<T, Invalid<'_>>) -> Read<T> {
    r.map_err(|e| e.to_string())
}

/// Everything a filter's accessors give, errors included.
fn filter_values(f: &LogFilter<'_>) -> String {
    let addresses: Read<Vec<Read<_>>> = read(f.addresses()).map(|a| a.map(read).collect());
    let topics: Read<Vec<Read<_>>> = read(f.topics()).map(|t| {
        t.map(|position| {
            read(position).map(|p| match p {
                TopicFilter::AnyOf(set) => format!("{:?}", set.map(read).collect::<Vec<_>>()),
                other => format!("{other:?}"),
            })
        })
        .collect()
    });
    format!(
        "{:?} {:?} {:?} {addresses:?} {topics:?}",
        read(f.from_block()),
        read(f.to_block()),
        read(f.block_hash()),
    )
}

/// Everything a call object's accessors give, errors included.
fn call_values(c: &CallRequest<'_>, arena: &bumpalo::Bump) -> String {
    let hashes: Read<Vec<Read<_>>> = read(c.blob_versioned_hashes()).map(|h| h.map(read).collect());
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {hashes:?}",
        read(c.from()),
        read(c.to()),
        read(c.gas()),
        read(c.gas_price()),
        read(c.max_fee_per_gas()),
        read(c.max_priority_fee_per_gas()),
        read(c.max_fee_per_blob_gas()),
        read(c.value()),
        read(c.nonce()),
        read(c.chain_id()),
        read(c.tx_type()),
        read(c.input_in(arena)),
        c.access_list(),
        c.authorization_list(),
    )
}

/// The two readings of one value, then of what follows it (a block id,
/// as `eth_call`'s second param): equal, or both refused alike.
fn agree<T: Debug>(
    params: Option<Params<'_>>,
    what: &str,
    fused: impl FnOnce(&mut EthParams<'_>) -> Read<T>,
    general: impl FnOnce(&mut EthParams<'_>) -> Read<T>,
) {
    let (mut a, mut b) = (EthParams::new(params), EthParams::new(params));
    let (x, y) = (fused(&mut a), general(&mut b));
    assert_eq!(format!("{x:?}"), format!("{y:?}"), "{what}");
    if x.is_ok() {
        // Both stand after the value: the next one reads alike.
        let next = (
            a.next_block_id("b"),
            b.optional("b").map(|p| p.block_id()).transpose(),
        );
        assert_eq!(read(next.0), read(next.1), "{what}, then a block id");
        assert_eq!(read(a.finish()), read(b.finish()), "{what}, then the end");
    }
}

/// A 32-byte hash or a 20-byte address written as `0x` and hex digits,
/// lowercased, from serde_json's reading of the text.
fn hex_of(v: &serde_json::Value, bytes: usize) -> Option<String> {
    let s = v.as_str()?;
    let digits = s.strip_prefix("0x")?;
    (digits.len() == 2 * bytes && digits.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("0x{}", digits.to_ascii_lowercase()))
}

/// What a filter's `address` and `topics` match, read by serde_json and
/// this reference (geth's rules: `null`, or alternatives holding `null` or
/// none, match anything), when every address and topic is well formed and
/// there are at most four positions; `None` otherwise.
fn reference_filter(filter: &serde_json::Value) -> Option<(Vec<String>, Vec<Vec<String>>)> {
    let object = filter.as_object()?;
    let mut addresses = match object.get("address") {
        None | Some(serde_json::Value::Null) => vec![],
        Some(serde_json::Value::Array(list)) => {
            list.iter().map(|a| hex_of(a, 20)).collect::<Option<_>>()?
        }
        Some(one) => vec![hex_of(one, 20)?],
    };
    addresses.sort();
    let topics = match object.get("topics") {
        None | Some(serde_json::Value::Null) => vec![],
        Some(serde_json::Value::Array(positions)) if positions.len() <= 4 => positions
            .iter()
            .map(|p| match p {
                serde_json::Value::Null => Some(vec![]),
                serde_json::Value::Array(alternatives) => {
                    let hashes: Vec<String> = alternatives
                        .iter()
                        .filter(|t| !t.is_null())
                        .map(|t| hex_of(t, 32))
                        .collect::<Option<_>>()?;
                    let any = alternatives.is_empty() || alternatives.iter().any(|t| t.is_null());
                    Some(if any { vec![] } else { hashes })
                }
                one => Some(vec![hex_of(one, 32)?]),
            })
            .collect::<Option<_>>()?,
        Some(_) => return None,
    };
    Some((addresses, topics))
}

/// Our reading of the same, when the filter's accessors all succeed.
fn our_filter(f: &LogFilter<'_>) -> Option<(Vec<String>, Vec<Vec<String>>)> {
    let mut addresses: Vec<String> = f
        .addresses()
        .ok()?
        .map(|a| a.map(|a| format!("{a:#x}")))
        .collect::<Result<_, _>>()
        .ok()?;
    addresses.sort();
    let topics = f
        .topics()
        .ok()?
        .map(|p| {
            Ok(match p? {
                TopicFilter::Any => vec![],
                TopicFilter::One(h) => vec![format!("{h:#x}")],
                TopicFilter::AnyOf(set) => set
                    .map(|h| h.map(|h| format!("{h:#x}")))
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<_, Invalid<'_>>>()
        .ok()?;
    Some((addresses, topics))
}

pub fn check(data: &[u8]) {
    let mut message = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":"#.to_vec();
    message.extend_from_slice(data);
    message.push(b'}');
    let arena = bumpalo::Bump::new();
    let Ok(msg) = rpcwire::parse(&message, &arena) else {
        return;
    };
    let Some(request) = msg.into_single().and_then(|e| e.request()) else {
        return;
    };
    let params = request.params();
    // The filter against an independent reading of the text.
    if let Ok(f) = EthParams::new(params).next_log_filter("f")
        && let Some(ours) = our_filter(&f)
        && let Ok(serde_json::Value::Array(all)) = serde_json::from_slice(data)
        && let Some(want) = all.first().and_then(reference_filter)
    {
        // Addresses are a set in geth and alloy; topics keep their order.
        let mut ours = ours;
        ours.0.dedup();
        let mut want = want;
        want.0.dedup();
        assert_eq!(ours, want, "log filter against serde_json");
    }
    agree(
        params,
        "log filter",
        |p| read(p.next_log_filter("f")).map(|f| filter_values(&f)),
        |p| read(p.required("f").and_then(|v| v.log_filter())).map(|f| filter_values(&f)),
    );
    agree(
        params,
        "call object",
        |p| read(p.next_call_request("c")).map(|c| call_values(&c, &arena)),
        |p| read(p.required("c").and_then(|v| v.call_request())).map(|c| call_values(&c, &arena)),
    );
    agree(
        params,
        "block id",
        |p| read(p.next_block_id("b")),
        |p| read(p.optional("b").map(|v| v.block_id()).transpose()),
    );
    agree(
        params,
        "address",
        |p| read(p.next_address("a")),
        |p| read(p.required("a").and_then(|v| v.address())),
    );
    agree(
        params,
        "hash",
        |p| read(p.next_hash("h")),
        |p| read(p.required("h").and_then(|v| v.hash())),
    );
    agree(
        params,
        "data",
        |p| read(p.next_bytes_in("d", &arena)).map(<[u8]>::to_vec),
        |p| read(p.required("d").and_then(|v| v.bytes_in(&arena))).map(<[u8]>::to_vec),
    );
}
