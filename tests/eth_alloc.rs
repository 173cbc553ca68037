//! Zero allocation, measured, for the `eth` layer: decoding the params of
//! real traffic (every field into its value, call data into the reused
//! arena) and answering through the writers allocate nothing.

#[path = "../benches/support/corpus.rs"]
mod corpus;
#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "../benches/support/eth_params.rs"]
mod eth_params;

use counting_alloc::{CountingAlloc, allocations_during};
use rpcwire::eth::{EthParams, EthReply, Invalid, TopicFilter, U256};
use rpcwire::{Call, Connection, Dispatcher};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Decodes every field of the params of `method`, returning a checksum.
/// `fused`: through the `next_*` readers, else `required` / `optional`
/// and the value decoders.
fn decode<'a>(
    method: &str,
    params: Option<rpcwire::request::Params<'a>>,
    arena: &bumpalo::Bump,
    fused: bool,
) -> Result<u64, Invalid<'a>> {
    let mut p = EthParams::new(params);
    let mut sum = 0u64;
    let mut add = |x: u64| sum = sum.rotate_left(5) ^ x;
    match method {
        "eth_call" => {
            let tx = if fused {
                p.next_call_request("transaction")?
            } else {
                p.required("transaction")?.call_request()?
            };
            add(tx.from()?.map_or(0, |a| a[19] as u64));
            add(tx.to()?.map_or(0, |a| a[19] as u64));
            add(tx.gas()?.unwrap_or(0));
            add(tx.gas_price()?.unwrap_or(0) as u64);
            add(tx.max_fee_per_gas()?.unwrap_or(0) as u64);
            add(tx.max_priority_fee_per_gas()?.unwrap_or(0) as u64);
            add(tx.value()?.unwrap_or(U256::ZERO).as_limbs()[0]);
            add(tx.nonce()?.unwrap_or(0));
            add(tx.input_in(arena)?.map_or(0, |b| b.len() as u64));
            let block = if fused {
                p.next_block_id("blockNumber")?
            } else {
                p.optional("blockNumber")
                    .map(|b| b.block_id())
                    .transpose()?
            };
            add(block.and_then(|b| b.number()).unwrap_or(1));
        }
        "eth_getLogs" => {
            let f = if fused {
                p.next_log_filter("filter")?
            } else {
                p.required("filter")?.log_filter()?
            };
            add(f.from_block()?.and_then(|b| b.number()).unwrap_or(1));
            add(f.to_block()?.and_then(|b| b.number()).unwrap_or(1));
            add(f.block_hash()?.map_or(0, |h| h[31] as u64));
            for a in f.addresses()? {
                add(a?[19] as u64);
            }
            for t in f.topics()? {
                match t? {
                    TopicFilter::Any => add(7),
                    TopicFilter::One(h) => add(h[31] as u64),
                    TopicFilter::AnyOf(set) => {
                        for h in set {
                            add(h?[31] as u64);
                        }
                    }
                }
            }
        }
        "eth_getBalance" => {
            let (address, block) = if fused {
                (p.next_address("address")?, p.next_block_id("blockNumber")?)
            } else {
                let a = p.required("address")?.address()?;
                (
                    a,
                    p.optional("blockNumber")
                        .map(|b| b.block_id())
                        .transpose()?,
                )
            };
            add(address[19] as u64);
            add(block.and_then(|b| b.number()).unwrap_or(1));
        }
        "eth_sendRawTransaction" => {
            let tx = if fused {
                p.next_bytes_in("transaction", arena)?
            } else {
                p.required("transaction")?.bytes_in(arena)?
            };
            add(tx.len() as u64);
        }
        _ => unreachable!(),
    }
    p.finish()?;
    Ok(sum)
}

#[test]
fn decoding_real_params_allocates_nothing() {
    let corpora: Vec<(&str, Vec<Vec<u8>>)> = eth_params::METHODS
        .iter()
        .enumerate()
        .map(|(k, m)| (*m, eth_params::messages(m, 77 + k as u64, 5_000)))
        .collect();
    let parse_arena = bumpalo::Bump::new();
    let parsed: Vec<(&str, rpcwire::request::Params<'_>)> = corpora
        .iter()
        .flat_map(|(m, msgs)| msgs.iter().map(move |msg| (*m, msg)))
        .map(|(m, msg)| {
            let params = rpcwire::parse(msg, &parse_arena)
                .unwrap()
                .into_single()
                .unwrap()
                .request()
                .unwrap()
                .params();
            (m, params.unwrap())
        })
        .collect();
    // The per-message arena is made once and reset between messages.
    let mut arena = bumpalo::Bump::with_capacity(64 * 1024);
    let (allocations, total) = allocations_during(|| {
        let mut total = 0u64;
        for fused in [false, true] {
            for (m, p) in &parsed {
                arena.reset();
                let sum = decode(m, Some(*p), &arena, fused).expect("valid traffic");
                total = total.wrapping_add(sum);
            }
        }
        total
    });
    assert_ne!(total, 0);
    assert_eq!(allocations, 0, "decoding {} messages", parsed.len());

    // The counter does count: a refusal, turned into the client's error,
    // allocates.
    let (refusal, _) = allocations_during(|| {
        let msg = br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x01"]}"#;
        let p = rpcwire::parse(msg, &arena)
            .unwrap()
            .into_single()
            .unwrap()
            .request()
            .unwrap()
            .params();
        rpcwire::RpcError::from(decode("eth_getBalance", p, &arena, true).unwrap_err())
    });
    assert!(refusal > 0);
}

#[test]
fn dispatching_with_eth_handlers_allocates_nothing_after_warm_up() {
    fn handler(call: Call<'_, ()>) -> Result<rpcwire::dispatch::Done, rpcwire::RpcError> {
        let method = call.method();
        let sum = decode(method, call.params, call.arena, true)?;
        match method {
            "eth_call" => call.reply.data(&sum.to_be_bytes()),
            "eth_getLogs" => call.reply.hash(&rpcwire::eth::B256::repeat_byte(sum as u8)),
            "eth_getBalance" => call.reply.quantity_u256(U256::from(sum) << 100),
            _ => EthReply::quantity(call.reply, sum as u128),
        }
    }
    let mut b = Dispatcher::builder(());
    for m in eth_params::METHODS {
        b = b.method(m, handler);
    }
    let d = b.build().unwrap();
    let messages: Vec<Vec<u8>> = eth_params::METHODS
        .iter()
        .enumerate()
        .flat_map(|(k, m)| eth_params::messages(m, 500 + k as u64, 2_000))
        .collect();
    let mut conn = Connection::new();
    let mut out = Vec::with_capacity(64 * 1024);
    // Warm-up: the arena grows to its working size (the largest call data).
    for msg in &messages {
        out.clear();
        d.handle(msg, &mut conn, &mut out);
    }
    let (allocations, written) = allocations_during(|| {
        let mut written = 0;
        for msg in &messages {
            out.clear();
            d.handle(msg, &mut conn, &mut out);
            written += out.len();
        }
        written
    });
    let last: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(last["result"].as_str().unwrap().starts_with("0x"), "{last}");
    assert!(written > 100_000);
    assert_eq!(allocations, 0, "dispatching {} messages", messages.len());
}
