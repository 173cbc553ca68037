//! The gateway example's built-in chain (`examples/gateway/chain.rs`,
//! `local.rs`) against what a real node (anvil, geth) answers for the same
//! requests: gas and fees of transfers with calldata, bad log filters, fee
//! history, and `eth_call`'s checks. Each test runs a gateway on 127.0.0.1
//! and stops it; transactions are signed here with anvil's dev keys.

use std::net::SocketAddr;

use alloy_consensus::crypto::secp256k1::sign_message;
use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope, TxLegacy};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes as ABytes, TxKind, U256};
use serde_json::{Value, json};

use super::*;
use crate::http_request::post_close;

/// One JSON-RPC call over HTTP/1.1; the reply, parsed.
async fn rpc(addr: SocketAddr, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let (status, body) = post_close(addr, &body).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A transfer on the built-in chain (chain id 31337).
fn eip1559(nonce: u64, to: Address, value: u128) -> TxEip1559 {
    super::eip1559(nonce, to, value, 31337)
}

async fn send(addr: SocketAddr, raw: &str) -> Value {
    rpc(addr, "eth_sendRawTransaction", json!([raw])).await
}

fn quantity(v: &Value) -> u128 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a quantity: {v}"));
    u128::from_str_radix(s.strip_prefix("0x").unwrap(), 16).unwrap()
}

async fn balance(addr: SocketAddr, who: Address) -> u128 {
    quantity(&rpc(addr, "eth_getBalance", json!([who, "latest"])).await["result"])
}

/// The error's code and message, or a panic naming the success.
fn error(r: &Value) -> (i64, String) {
    let Some(e) = r.get("error") else {
        panic!("succeeded where it should fail: {r}");
    };
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_string(),
    )
}

/// A transfer with calldata pays at least the EIP-7623 floor (Prague: 21000
/// + 10 gas a token, a token a zero byte and four a non-zero one), as anvil
/// and geth charge; one whose gas limit is below the floor is refused with
/// geth's words, and `eth_estimateGas` says the floor. The chain once
/// charged 16 gas a non-zero byte only: 100 bytes of 0xff used 22,600 gas
/// where anvil uses 25,000, and a transaction with a 22,600 gas limit was
/// mined where geth refuses it ("insufficient gas for floor data gas
/// cost").
#[tokio::test]
async fn calldata_pays_the_eip7623_floor() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let to = Address::repeat_byte(0x42);
    let data = ABytes::from(vec![0xffu8; 100]);
    let floor = 21_000 + 10 * 4 * 100;

    let est = rpc(
        a,
        "eth_estimateGas",
        json!([{"from": address(0), "to": to, "data": data}]),
    )
    .await;
    assert_eq!(quantity(&est["result"]), floor, "{est}");

    // Below the floor (but above the standard cost): refused.
    let short = TxEip1559 {
        gas_limit: 21_000 + 16 * 100,
        input: data.clone(),
        ..eip1559(0, to, 1)
    };
    let (code, message) = error(&send(a, &sign(short, key(0))).await);
    assert_eq!(code, -32000);
    assert!(
        message.starts_with("insufficient gas for floor data gas cost"),
        "{message}"
    );
    assert_eq!(
        rpc(a, "eth_blockNumber", json!([])).await["result"],
        "0x0",
        "a refused transaction was mined"
    );

    // At the floor: mined, charged the floor.
    let before = balance(a, address(0)).await;
    let tx = TxEip1559 {
        gas_limit: floor as u64,
        input: data.clone(),
        ..eip1559(0, to, 1)
    };
    let r = send(a, &sign(tx, key(0))).await;
    let hash = r["result"].as_str().unwrap_or_else(|| panic!("{r}"));
    let receipt = rpc(a, "eth_getTransactionReceipt", json!([hash])).await["result"].clone();
    assert_eq!(quantity(&receipt["gasUsed"]), floor);
    assert_eq!(quantity(&receipt["cumulativeGasUsed"]), floor);
    let price = quantity(&receipt["effectiveGasPrice"]);
    assert_eq!(before - balance(a, address(0)).await, floor * price + 1);
    let block = rpc(a, "eth_getBlockByNumber", json!(["0x1", false])).await["result"].clone();
    assert_eq!(quantity(&block["gasUsed"]), floor);

    // Zero bytes cost 4 gas each, the floor 10 each: the floor again.
    let zeros = ABytes::from(vec![0u8; 100]);
    let est = rpc(
        a,
        "eth_estimateGas",
        json!([{"from": address(0), "to": to, "data": zeros}]),
    )
    .await;
    assert_eq!(quantity(&est["result"]), 21_000 + 10 * 100, "{est}");
    // An access list makes the standard cost the larger one.
    let list = json!([{"address": to, "storageKeys": [B256::ZERO]}]);
    let est = rpc(
        a,
        "eth_estimateGas",
        json!([{"from": address(0), "to": to, "data": "0x00ff", "accessList": list}]),
    )
    .await;
    assert_eq!(
        quantity(&est["result"]),
        21_000 + 4 + 16 + 2_400 + 1_900,
        "{est}"
    );
}

/// An estimate for a transaction the chain would not take (EIP-4844 blobs,
/// EIP-7702 authorizations; named by `type` or by their fields) is refused
/// as its send is: it was answered with a transfer's gas. Found by a review.
#[tokio::test]
async fn estimates_for_transaction_types_it_does_not_take_are_refused() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let to = address(1);
    let hash = format!("0x01{}", "00".repeat(31));
    for (tx, kind) in [
        (json!({"from": address(0), "to": to, "type": "0x3"}), "3"),
        (
            json!({"from": address(0), "to": to, "blobVersionedHashes": [hash]}),
            "3",
        ),
        (
            json!({"from": address(0), "to": to, "authorizationList": []}),
            "4",
        ),
    ] {
        let est = rpc(a, "eth_estimateGas", json!([tx])).await;
        let message = est["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.ends_with(&format!("not supported by the built-in chain: {kind}")),
            "{tx}: {est}"
        );
    }
    for tx in [
        json!({"from": address(0), "to": to, "type": "0x2"}),
        json!({"from": address(0), "to": to, "blobVersionedHashes": []}),
    ] {
        let est = rpc(a, "eth_estimateGas", json!([tx])).await;
        assert_eq!(quantity(&est["result"]), 21_000, "{tx}: {est}");
    }
}

/// Osaka's per-transaction gas cap (EIP-7825) and geth's transaction size
/// limit hold, in geth's words: a transaction with more than 2^24 gas is
/// refused (it was mined up to the block's 30M), and so is a signed
/// transaction over 128 KiB (one of megabytes of calldata was kept for
/// the chain's life); the estimate stops at the cap too. With a fee cap,
/// the estimate is bounded by what the sender's balance pays for past the
/// value, as geth's estimator bounds it (it answered 21,000 for a sender
/// whose send was then refused for its fee), and a value of the whole
/// balance is "insufficient funds for transfer".
#[tokio::test]
async fn the_gas_cap_the_size_limit_and_fee_bounded_estimates() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let to = Address::repeat_byte(0x42);
    let over_cap = TxEip1559 {
        gas_limit: 20_000_000,
        ..eip1559(0, to, 1)
    };
    let (code, message) = error(&send(a, &sign(over_cap, key(0))).await);
    assert_eq!(code, -32000);
    assert_eq!(
        message,
        "transaction gas limit too high (cap: 16777216, tx: 20000000)"
    );
    let oversized = TxEip1559 {
        gas_limit: 2_000_000,
        input: ABytes::from(vec![0u8; 140_000]),
        ..eip1559(0, to, 1)
    };
    let raw = sign(oversized, key(0));
    let (code, message) = error(&send(a, &raw).await);
    assert_eq!(code, -32000);
    let size = raw.len() / 2 - 1;
    assert_eq!(
        message,
        format!("oversized data: transaction size {size}, limit 131072")
    );
    assert_eq!(
        rpc(a, "eth_blockNumber", json!([])).await["result"],
        "0x0",
        "a refused transaction was mined"
    );
    // 1.7 MB of zeros: a floor of 17,021,000 gas, past the cap.
    let zeros = ABytes::from(vec![0u8; 1_700_000]);
    let est = rpc(
        a,
        "eth_estimateGas",
        json!([{"from": address(0), "to": to, "data": zeros}]),
    )
    .await;
    assert_eq!(
        error(&est).1,
        "gas required exceeds allowance (16777216)",
        "{est}"
    );

    let all = balance(a, address(0)).await;
    let gwei = 1_000_000_000u128;
    let estimate = |value: u128| {
        let call = json!({"from": address(0), "to": to, "value": format!("{value:#x}"), "maxFeePerGas": format!("{gwei:#x}")});
        rpc(a, "eth_estimateGas", json!([call]))
    };
    assert_eq!(
        error(&estimate(all).await).1,
        "insufficient funds for transfer"
    );
    // Enough for 20,000 gas at the fee cap, not 21,000.
    assert_eq!(
        error(&estimate(all - 20_000 * gwei).await).1,
        "gas required exceeds allowance (20000)"
    );
    assert_eq!(
        quantity(&estimate(all - 21_000 * gwei).await["result"]),
        21_000
    );
    // Without a fee cap the value alone is checked.
    let call = json!({"from": address(0), "to": to, "value": format!("{all:#x}")});
    let r = rpc(a, "eth_estimateGas", json!([call])).await;
    assert_eq!(quantity(&r["result"]), 21_000, "{r}");
}

/// `eth_getLogs` checks its filter's addresses and topics, as anvil and
/// geth do: a malformed address or topic, or a fifth topic position, is
/// -32602 (the chain once read neither and answered `[]` to any of them);
/// `null` positions and OR arrays (with `null` in them too) stay valid.
#[tokio::test]
async fn get_logs_checks_addresses_and_topics() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let t = format!("0x{}", "ab".repeat(32));
    for filter in [
        json!({"address": "0xbad"}),
        json!({"address": [Address::ZERO, "0x1234"]}),
        json!({"address": 7}),
        json!({"topics": ["0x12"]}),
        json!({"topics": [null, [t, "0xzz"]]}),
        json!({"topics": [null, null, null, null, null]}),
        json!({"topics": "0x12"}),
    ] {
        let r = rpc(a, "eth_getLogs", json!([filter])).await;
        let (code, _) = error(&r);
        assert_eq!(code, -32602, "{filter}: {r}");
    }
    for filter in [
        json!({"address": [Address::ZERO, Address::repeat_byte(1)]}),
        json!({"address": Address::ZERO, "topics": [null, [t, t], [null, t], []]}),
        json!({"topics": [t, null, null, t]}),
        json!({"address": [], "topics": null}),
    ] {
        let r = rpc(a, "eth_getLogs", json!([filter])).await;
        assert_eq!(r["result"], json!([]), "{filter}: {r}");
    }
}

/// The chain keeps every transaction for its life, so what it keeps in all
/// is bounded (`--chain-tx-bytes`): past it, a send is refused with a
/// clear error and nothing else changes; the dev keys are public, and
/// sends of 128 KiB each once grew its memory without end. Found by a
/// review.
#[tokio::test]
async fn the_transactions_kept_are_bounded() {
    let one = sign(eip1559(0, Address::repeat_byte(9), 1), key(1));
    let size = (one.len() - 2) / 2;
    let cost = size + chain::KEPT_PER_TRANSACTION;
    let gw = start(config::Config {
        chain_tx_bytes: 2 * cost + cost / 2,
        ..config::Config::default()
    })
    .await;
    let a = gw.addr;
    for nonce in 0..2 {
        let r = send(a, &sign(eip1559(nonce, Address::repeat_byte(9), 1), key(1))).await;
        assert!(r["result"].is_string(), "{r}");
    }
    let r = send(a, &sign(eip1559(2, Address::repeat_byte(9), 1), key(1))).await;
    let (code, message) = error(&r);
    assert_eq!(code, -32000, "{r}");
    assert!(
        message.starts_with("the built-in chain is full"),
        "{message}"
    );
    let r = rpc(a, "eth_getTransactionCount", json!([address(1), "latest"])).await;
    assert_eq!(r["result"], "0x2", "{r}");
}

/// `--chain-tx-bytes` bounds what the chain holds, not only the signed
/// bytes: a transfer's 112 signed bytes were counted, and the chain kept
/// 2.1-2.6 KB for each (its block, decoded envelope, maps, histories), 23
/// times the budget in all (1.5 GiB at the default). Found by a review.
#[test]
fn the_chain_s_memory_stays_near_its_transaction_budget() {
    use alloy_primitives::hex;
    let budget = 256 * 1024;
    let raws: Vec<Vec<u8>> = (0..4000u64)
        .map(|i| {
            let signed = sign(crate::eip1559(i, Address::repeat_byte(9), 1, 31337), key(1));
            hex::decode(&signed[2..]).unwrap()
        })
        .collect();
    let chain = chain::Chain::new(31337, budget);
    let (held, sent) = crate::counting_alloc::held_after(|| {
        raws.iter()
            .take_while(|r| chain.send_raw(r).is_ok())
            .count()
    });
    assert!(sent < raws.len(), "the budget was reached");
    assert!(sent > 50, "{sent} transfers sent");
    assert!(
        held as usize <= budget + budget / 2,
        "{sent} transfers within a {budget}-byte budget hold {held} bytes ({:.1}x the budget)",
        held as f64 / budget as f64
    );
}

/// `eth_feeHistory`: the rewards are the tips the blocks' transactions
/// paid (0 for an empty block, as anvil and geth answer), not a constant 1
/// gwei; percentiles out of [0, 100] or decreasing are refused (geth's
/// "invalid reward percentile"; they were taken); a block count of 0 is an
/// empty history.
#[tokio::test]
async fn fee_history_reports_the_tips_paid() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    // Block 1: a legacy transaction at 5 gwei (tip 4 gwei over the 1 gwei
    // base fee); block 2: EIP-1559 with a 2 gwei tip.
    let legacy = TxLegacy {
        chain_id: Some(31337),
        nonce: 0,
        gas_price: 5_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(9)),
        value: U256::from(1u8),
        input: ABytes::new(),
    };
    let r = send(a, &sign(legacy, key(1))).await;
    assert!(r["result"].is_string(), "{r}");
    let tx = TxEip1559 {
        max_priority_fee_per_gas: 2_000_000_000,
        ..eip1559(0, Address::repeat_byte(9), 1)
    };
    let r = send(a, &sign(tx, key(2))).await;
    assert!(r["result"].is_string(), "{r}");

    // The count as geth's `DecimalOrHex` takes it: a QUANTITY, a number, or
    // a string of decimal digits (refused as "missing 0x prefix").
    for count in [json!("0x3"), json!(3), json!("3")] {
        let r = rpc(a, "eth_feeHistory", json!([count, "latest", [10]])).await;
        assert_eq!(
            r["result"]["baseFeePerGas"].as_array().map(Vec::len),
            Some(4),
            "{count}: {r}"
        );
    }
    let r = rpc(a, "eth_feeHistory", json!(["3x", "latest", [10]])).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = rpc(a, "eth_feeHistory", json!(["0x3", "latest", [10, 50, 90]])).await;
    let h = &r["result"];
    assert_eq!(h["oldestBlock"], "0x0", "{r}");
    assert_eq!(
        h["reward"],
        json!([
            ["0x0", "0x0", "0x0"],
            ["0xee6b2800", "0xee6b2800", "0xee6b2800"],
            ["0x77359400", "0x77359400", "0x77359400"]
        ]),
        "{r}"
    );
    assert_eq!(h["baseFeePerGas"].as_array().unwrap().len(), 4);
    assert_eq!(h["gasUsedRatio"].as_array().unwrap().len(), 3);

    for bad in [
        json!([-1]),
        json!([101]),
        json!([75, 25]),
        json!([10, 50, 20]),
    ] {
        let r = rpc(a, "eth_feeHistory", json!(["0x2", "latest", bad])).await;
        let (code, message) = error(&r);
        assert_eq!(code, -32602, "{bad}: {r}");
        assert!(message.contains("invalid reward percentile"), "{message}");
    }
    // At most 100 percentiles, as geth: the answer is built whole, a reward
    // per block and percentile (a body of zeros asked for millions).
    let r = rpc(a, "eth_feeHistory", json!(["0x2", "latest", vec![0; 101]])).await;
    let (code, message) = error(&r);
    assert_eq!(code, -32602, "{r}");
    assert!(message.contains("over the query limit 100"), "{message}");
    let r = rpc(a, "eth_feeHistory", json!(["0x2", "latest", vec![0; 100]])).await;
    assert_eq!(
        r["result"]["reward"][1].as_array().unwrap().len(),
        100,
        "{r}"
    );
    // Equal neighbours are allowed (reth and anvil take them).
    let r = rpc(a, "eth_feeHistory", json!(["0x1", "latest", [50, 50]])).await;
    assert_eq!(
        r["result"]["reward"],
        json!([["0x77359400", "0x77359400"]]),
        "{r}"
    );

    // No blocks: nothing (the chain once named the block after the head
    // as the oldest one).
    let r = rpc(a, "eth_feeHistory", json!(["0x0", "latest", [50]])).await;
    let h = &r["result"];
    assert_eq!(h["oldestBlock"], "0x0", "{r}");
    assert_eq!(h["baseFeePerGas"], json!([]), "{r}");
    assert_eq!(h["gasUsedRatio"], json!([]), "{r}");
}

/// `eth_call` checks what geth and anvil check before running a call,
/// instead of answering `0x` to anything with a `to`: the caller's balance
/// must cover `value + gas × price`, the gas limit must cover the intrinsic
/// gas, and the tip may not exceed the fee cap.
#[tokio::test]
async fn eth_call_checks_funds_gas_and_fees() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let poor = Address::repeat_byte(0x99);
    let to = Address::repeat_byte(0x42);
    let cases = [
        (
            json!({"from": poor, "to": to, "value": "0x1"}),
            "insufficient funds for gas * price + value",
        ),
        (
            json!({"from": poor, "to": to, "gasPrice": "0x3b9aca00"}),
            "insufficient funds for gas * price + value",
        ),
        // A fee given under the base fee (1 gwei), as geth refuses it (the
        // send would be refused so); a gas price with EIP-1559 fields.
        (
            json!({"from": address(0), "to": to, "gasPrice": "0x1"}),
            "max fee per gas less than block base fee",
        ),
        (
            json!({"from": address(0), "to": to, "maxFeePerGas": "0x1"}),
            "max fee per gas less than block base fee",
        ),
        (
            json!({"from": address(0), "to": to, "gasPrice": "0x3b9aca00", "maxFeePerGas": "0x3b9aca00"}),
            "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified",
        ),
        (
            json!({"from": address(0), "to": to, "value": format!("{:#x}", U256::MAX)}),
            "insufficient funds for gas * price + value",
        ),
        (
            json!({"from": address(0), "to": to, "gas": "0x5000"}),
            "intrinsic gas too low",
        ),
        (
            json!({"from": address(0), "to": to, "gas": "0x5848", "data": format!("0x{}", "ff".repeat(100))}),
            "insufficient gas for floor data gas cost",
        ),
        (
            json!({"from": address(0), "to": to, "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x77359401"}),
            "max priority fee per gas higher than max fee per gas",
        ),
    ];
    for (call, words) in cases {
        let r = rpc(a, "eth_call", json!([call, "latest"])).await;
        let (code, message) = error(&r);
        assert_eq!(code, -32000, "{call}: {r}");
        assert!(message.starts_with(words), "{call}: {message}");
    }
    // What a transfer's simulation sends: `0x`.
    for call in [
        json!({"from": address(0), "to": to, "value": "0x1"}),
        json!({"to": to}),
        json!({"from": address(0), "to": to, "value": "0x1", "gas": "0x5208", "maxFeePerGas": "0x77359400"}),
        json!({"from": poor, "to": to, "data": "0x1234"}),
    ] {
        let r = rpc(a, "eth_call", json!([call, "latest"])).await;
        assert_eq!(r["result"], "0x", "{call}: {r}");
    }
    // `eth_estimateGas` checks the fees as the send will (it answered
    // 0x5208 for a transfer the send then refused).
    let r = rpc(
        a,
        "eth_estimateGas",
        json!([{"from": address(0), "to": to, "value": "0x1", "maxFeePerGas": "0x1"}]),
    )
    .await;
    let (code, message) = error(&r);
    assert_eq!(code, -32000, "{r}");
    assert!(
        message.starts_with("max fee per gas less than block base fee"),
        "{message}"
    );
    // A gas limit under a transfer's is no limit to geth's estimator (it
    // takes the block's; this was "gas required exceeds allowance").
    let r = rpc(
        a,
        "eth_estimateGas",
        json!([{"from": address(0), "to": to, "gas": "0x5000"}]),
    )
    .await;
    assert_eq!(r["result"], "0x5208", "{r}");
    // Without `from` the zero address pays (it has nothing here), as in
    // `eth_call`: the funds were not checked at all.
    let no_from = json!({"to": to, "value": "0x1"});
    for method in ["eth_call", "eth_estimateGas"] {
        let r = rpc(a, method, json!([no_from])).await;
        let (code, message) = error(&r);
        assert_eq!(code, -32000, "{method}: {r}");
        assert!(
            message.contains("insufficient funds"),
            "{method}: {message}"
        );
    }
    // `eth_estimateGas` with a gas limit below what the call needs: geth's
    // "gas required exceeds allowance".
    let r = rpc(
        a,
        "eth_estimateGas",
        json!([{"from": address(0), "to": to, "gas": "0x5208", "data": "0x1234"}]),
    )
    .await;
    let (code, message) = error(&r);
    assert_eq!(code, -32000, "{r}");
    assert!(
        message.starts_with("gas required exceeds allowance"),
        "{message}"
    );
}

/// An empty raw transaction is named as such (it was "Unexpected type
/// flag. Got 0.", alloy's words for a typed transaction's bad first byte).
#[tokio::test]
async fn an_empty_raw_transaction_says_so() {
    let gw = start(config::Config::default()).await;
    let (code, message) = error(&send(gw.addr, "0x").await);
    assert_eq!(code, -32000);
    assert!(message.contains("empty"), "{message}");
}

/// Each block's JSON is its header and body: the hash is the keccak of the
/// header rebuilt from the JSON's fields, `parentHash` is the previous
/// block's hash, `transactionsRoot` is the root of the transactions sent,
/// and `size` is the block's RLP length, as geth and anvil report it (it
/// was an estimate, 540 bytes plus the transactions: 540 for a genesis
/// block whose RLP is 514 bytes).
#[tokio::test]
async fn blocks_are_their_headers_and_bodies() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let mut sent: Vec<TxEnvelope> = Vec::new();
    for (i, data) in [vec![], vec![0u8, 1, 2], vec![0xff; 40]]
        .into_iter()
        .enumerate()
    {
        let tx = TxEip1559 {
            gas_limit: 30_000,
            input: data.into(),
            ..eip1559(0, Address::repeat_byte(3), 1)
        };
        let sig = sign_message(key(i), tx.signature_hash()).unwrap();
        let tx = TxEnvelope::from(tx.into_signed(sig));
        let raw = format!("0x{}", alloy_primitives::hex::encode(tx.encoded_2718()));
        let r = send(a, &raw).await;
        assert!(r["result"].is_string(), "{r}");
        sent.push(tx);
    }
    let legacy = TxLegacy {
        chain_id: Some(31337),
        nonce: 1,
        gas_price: 2_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(3)),
        value: U256::from(5u8),
        input: ABytes::new(),
    };
    let sig = sign_message(key(0), legacy.signature_hash()).unwrap();
    let legacy = TxEnvelope::from(legacy.into_signed(sig));
    let raw = format!("0x{}", alloy_primitives::hex::encode(legacy.encoded_2718()));
    assert!(send(a, &raw).await["result"].is_string());
    sent.push(legacy);

    let b256 = |v: &Value| v.as_str().unwrap().parse::<B256>().unwrap();
    let mut parent = B256::ZERO;
    for n in 0..=sent.len() {
        let b = rpc(a, "eth_getBlockByNumber", json!([format!("{n:#x}"), false])).await["result"]
            .clone();
        let header = alloy_consensus::Header {
            parent_hash: b256(&b["parentHash"]),
            ommers_hash: b256(&b["sha3Uncles"]),
            beneficiary: b["miner"].as_str().unwrap().parse().unwrap(),
            state_root: b256(&b["stateRoot"]),
            transactions_root: b256(&b["transactionsRoot"]),
            receipts_root: b256(&b["receiptsRoot"]),
            logs_bloom: b["logsBloom"].as_str().unwrap().parse().unwrap(),
            difficulty: U256::from(quantity(&b["difficulty"])),
            number: quantity(&b["number"]) as u64,
            gas_limit: quantity(&b["gasLimit"]) as u64,
            gas_used: quantity(&b["gasUsed"]) as u64,
            timestamp: quantity(&b["timestamp"]) as u64,
            extra_data: b["extraData"].as_str().unwrap().parse().unwrap(),
            mix_hash: b256(&b["mixHash"]),
            nonce: b["nonce"].as_str().unwrap().parse().unwrap(),
            base_fee_per_gas: Some(quantity(&b["baseFeePerGas"]) as u64),
            ..Default::default()
        };
        assert_eq!(b256(&b["hash"]), header.hash_slow(), "block {n}: {b}");
        assert_eq!(header.parent_hash, parent, "block {n}");
        parent = header.hash_slow();
        let txs: Vec<TxEnvelope> = if n == 0 {
            Vec::new()
        } else {
            vec![sent[n - 1].clone()]
        };
        assert_eq!(
            header.transactions_root,
            alloy_consensus::proofs::calculate_transaction_root(&txs),
            "block {n}"
        );
        let body = alloy_consensus::BlockBody {
            transactions: txs,
            ommers: Vec::new(),
            withdrawals: None,
        };
        let size = alloy_consensus::Block::rlp_length_for(&header, &body);
        assert_eq!(quantity(&b["size"]), size as u128, "block {n}");
    }
}

/// `eth_call`'s state overrides (third param) and block overrides (fourth),
/// as geth and anvil take them: a balance override is the balance the call
/// is checked against; code put on the callee would run, which the chain
/// cannot do, so that is the no-EVM error instead of `0x` (the chain once
/// ignored the overrides whatever they held); malformed overrides are
/// -32602; block overrides are taken (nothing they change matters to a
/// call that runs no code).
#[tokio::test]
async fn eth_call_reads_state_and_block_overrides() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let poor = Address::repeat_byte(0x99);
    let to = Address::repeat_byte(0x42);
    let transfer = json!({"from": poor, "to": to, "value": "0x1"});
    let r = rpc(
        a,
        "eth_call",
        json!([transfer, "latest", {poor.to_string(): {"balance": "0x10"}}]),
    )
    .await;
    assert_eq!(r["result"], "0x", "{r}");
    let r = rpc(
        a,
        "eth_call",
        json!([transfer, "latest", {poor.to_string(): {"balance": "0x0"}}]),
    )
    .await;
    assert!(error(&r).1.starts_with("insufficient funds"), "{r}");

    let simple = json!({"from": address(0), "to": to});
    let r = rpc(
        a,
        "eth_call",
        json!([simple, "latest", {to.to_string(): {"code": "0x60016000526001601ff3"}}]),
    )
    .await;
    let (code, message) = error(&r);
    assert_eq!(code, -32000, "{r}");
    assert!(message.contains("no EVM"), "{message}");
    // Empty code is no code.
    let r = rpc(
        a,
        "eth_call",
        json!([simple, "latest", {to.to_string(): {"code": "0x"}}]),
    )
    .await;
    assert_eq!(r["result"], "0x", "{r}");

    for bad in [
        json!("x"),
        json!([1]),
        json!({"0xbad": {}}),
        json!({to.to_string(): {"balance": "zz"}}),
    ] {
        let r = rpc(a, "eth_call", json!([simple, "latest", bad])).await;
        assert_eq!(error(&r).0, -32602, "{bad}: {r}");
    }

    for ok in [
        json!([simple, "latest", null]),
        json!([simple, "latest", {}]),
        json!([simple, "latest", {}, {}]),
        json!([simple, "latest", null, {"number": "0x10", "baseFee": "0x0"}]),
    ] {
        let r = rpc(a, "eth_call", ok.clone()).await;
        assert_eq!(r["result"], "0x", "{ok}: {r}");
    }
    let r = rpc(a, "eth_call", json!([simple, "latest", {}, "x"])).await;
    assert_eq!(error(&r).0, -32602, "{r}");
}

/// `eth_estimateGas` takes state and block overrides too, as geth and
/// anvil do (it refused them as "too many params"): a balance override is
/// the sender's balance, code on the callee is the no-EVM error.
#[tokio::test]
async fn estimate_gas_reads_overrides() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let poor = Address::repeat_byte(0x99);
    let to = Address::repeat_byte(0x42);
    let transfer = json!({"from": poor, "to": to, "value": "0x1"});
    let r = rpc(
        a,
        "eth_estimateGas",
        json!([transfer, "latest", {poor.to_string(): {"balance": "0x10"}}]),
    )
    .await;
    assert_eq!(r["result"], "0x5208", "{r}");
    let r = rpc(a, "eth_estimateGas", json!([transfer, "latest", {}])).await;
    assert!(error(&r).1.starts_with("insufficient funds"), "{r}");
    let simple = json!({"from": address(0), "to": to});
    let r = rpc(
        a,
        "eth_estimateGas",
        json!([simple, "latest", {to.to_string(): {"code": "0x6001"}}]),
    )
    .await;
    assert!(error(&r).1.contains("no EVM"), "{r}");
    let r = rpc(a, "eth_estimateGas", json!([simple, "latest", {}, {}])).await;
    assert_eq!(r["result"], "0x5208", "{r}");
    let r = rpc(a, "eth_estimateGas", json!([simple, "latest", "x"])).await;
    assert_eq!(error(&r).0, -32602, "{r}");
}

/// A transfer to a precompile runs the precompile on a real node (a
/// 21,000 gas transfer to 0x…04 or 0x…0100 fails on anvil: status 0, the
/// value not moved); the chain has no EVM, so such a transaction, call or
/// estimate is refused clearly (it was mined as a plain transfer).
#[tokio::test]
async fn precompiles_are_refused() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    for to in [
        "0x0000000000000000000000000000000000000001",
        "0x0000000000000000000000000000000000000004",
        "0x0000000000000000000000000000000000000011",
        "0x0000000000000000000000000000000000000100",
    ] {
        let to: Address = to.parse().unwrap();
        let r = send(a, &sign(eip1559(0, to, 1), key(0))).await;
        let (code, message) = error(&r);
        assert_eq!(code, -32000, "{to}: {r}");
        assert!(message.contains("precompile"), "{to}: {message}");
        for method in ["eth_call", "eth_estimateGas"] {
            let r = rpc(a, method, json!([{"from": address(0), "to": to}, "latest"])).await;
            let (code, message) = error(&r);
            assert_eq!(code, -32000, "{method} {to}: {r}");
            assert!(message.contains("precompile"), "{method} {to}: {message}");
        }
    }
    assert_eq!(rpc(a, "eth_blockNumber", json!([])).await["result"], "0x0");
    // Their neighbours are accounts.
    for to in [
        "0x0000000000000000000000000000000000000000",
        "0x0000000000000000000000000000000000000012",
        "0x0000000000000000000000000000000000000101",
    ] {
        let to: Address = to.parse().unwrap();
        let r = rpc(
            a,
            "eth_call",
            json!([{"from": address(0), "to": to}, "latest"]),
        )
        .await;
        assert_eq!(r["result"], "0x", "{to}: {r}");
    }
}

/// `eth_getLogs` block ranges as the execution-apis conformance tests
/// (tests/eth_getLogs/filter-error-*) and anvil answer them: a `toBlock`
/// past the head is -32602 "block range extends beyond current head block"
/// (the chain answered `[]`, as if those blocks held no logs); a
/// `fromBlock` past the head with `toBlock` latest is -32602 "invalid block
/// range params"; two numbers in reverse order are -32000 "invalid block
/// range params" (it was -32602).
#[tokio::test]
async fn get_logs_ranges_past_the_head_are_errors() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let r = send(a, &sign(eip1559(0, Address::repeat_byte(1), 1), key(0))).await;
    assert!(r["result"].is_string(), "{r}");
    let r = send(a, &sign(eip1559(1, Address::repeat_byte(1), 1), key(0))).await;
    assert!(r["result"].is_string(), "{r}");
    // Head: 0x2.
    for (filter, code, message) in [
        (
            json!({"fromBlock": "0x1", "toBlock": "0x3"}),
            -32602,
            "block range extends beyond current head block",
        ),
        (
            json!({"fromBlock": "0x38", "toBlock": "0x3a"}),
            -32602,
            "block range extends beyond current head block",
        ),
        (
            json!({"fromBlock": "0x38", "toBlock": "latest"}),
            -32602,
            "invalid block range params",
        ),
        (
            json!({"fromBlock": "0x38"}),
            -32602,
            "invalid block range params",
        ),
        // `fromBlock` defaults to latest.
        (
            json!({"toBlock": "0x0"}),
            -32602,
            "invalid block range params",
        ),
        (
            json!({"fromBlock": "0x2", "toBlock": "0x1"}),
            -32000,
            "invalid block range params",
        ),
        (
            json!({"fromBlock": "0x3a", "toBlock": "0x38"}),
            -32000,
            "invalid block range params",
        ),
    ] {
        let r = rpc(a, "eth_getLogs", json!([filter])).await;
        assert_eq!(error(&r), (code, message.to_string()), "{filter}: {r}");
    }
    for filter in [
        json!({"fromBlock": "0x0", "toBlock": "0x2"}),
        json!({"fromBlock": "0x2", "toBlock": "latest"}),
        json!({"fromBlock": "earliest", "toBlock": "pending"}),
        json!({"fromBlock": "safe", "toBlock": "finalized"}),
        json!({}),
    ] {
        let r = rpc(a, "eth_getLogs", json!([filter])).await;
        assert_eq!(r["result"], json!([]), "{filter}: {r}");
    }
}

/// The README: "the base fee is burned and the priority fee goes to the
/// zero address, the coinbase, as on anvil". A transfer's fee leaves the
/// sender; its tip reaches the zero address; the base fee's share is gone
/// from every balance.
#[tokio::test]
async fn the_tip_goes_to_the_zero_address_and_the_base_fee_is_burned() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let (from, to) = (address(3), address(4));
    let before = [
        balance(a, from).await,
        balance(a, to).await,
        balance(a, Address::ZERO).await,
    ];
    let tx = eip1559(0, to, 1_000);
    let r = send(a, &sign(tx.clone(), key(3))).await;
    assert!(r.get("result").is_some(), "{r}");
    let after = [
        balance(a, from).await,
        balance(a, to).await,
        balance(a, Address::ZERO).await,
    ];
    let base = u128::from(chain::BASE_FEE);
    let tip = tx.max_priority_fee_per_gas.min(tx.max_fee_per_gas - base);
    let gas = 21_000u128;
    assert_eq!(
        before[0] - after[0],
        1_000 + gas * (base + tip),
        "the sender pays value and fee"
    );
    assert_eq!(after[1] - before[1], 1_000);
    assert_eq!(after[2] - before[2], gas * tip, "the tip to the coinbase");
    let (sum_before, sum_after): (u128, u128) = (before.iter().sum(), after.iter().sum());
    assert_eq!(sum_before - sum_after, gas * base, "the base fee burned");
}

/// `newHeads` subscriptions that end while no block is mined (unsubscribed,
/// or their connection closed) are not kept: without `--block-time` and
/// without transactions, a client subscribing and unsubscribing in a loop
/// once grew the chain's list of subscriptions (each holding its
/// connection's registry) without bound, as ended ones were only dropped
/// at the next block. The open ones still get every head.
#[test]
fn ended_head_subscriptions_are_not_kept_between_blocks() {
    use rpcwire::server::subscriptions::{SubscriptionConfig, Subscriptions};
    let chain = chain::Chain::new(31337, config::DEFAULT_CHAIN_TX_BYTES);
    let subs = Subscriptions::new(SubscriptionConfig::default(), None);
    let (_, live) = subs.subscribe().unwrap();
    chain.watch_heads(live.clone());
    let mut most = 0;
    for i in 0..10_000 {
        let held = if i % 2 == 0 {
            let (id, sink) = subs.subscribe().unwrap();
            let held = chain.watch_heads(sink);
            assert!(subs.unsubscribe_id(id));
            held
        } else {
            // A client that leaves.
            let gone = Subscriptions::new(SubscriptionConfig::default(), None);
            let held = chain.watch_heads(gone.subscribe().unwrap().1);
            gone.close_all();
            held
        };
        most = most.max(held);
    }
    assert!(most <= 100, "{most} subscriptions held with one open");
    chain.mine_empty();
    assert_eq!(live.queued(), 1);
    assert_eq!(chain.watch_heads(subs.subscribe().unwrap().1), 2);
}

/// A filter unpolled for its timeout (geth's five minutes; here made
/// short) is removed: polling it is "filter not found", and it no longer
/// counts against the bounds of [`chain::MAX_FILTERS`] and of
/// [`chain::MAX_FILTERS_PER_CLIENT`] (its client's), past which a new
/// filter is refused while none has expired. Polling restarts the clock;
/// `eth_getFilterLogs` does not (as in geth).
#[test]
fn filters_expire_unpolled_and_are_bounded() {
    use chain::{Chain, FilterKind, MAX_FILTERS, MAX_FILTERS_PER_CLIENT};
    use std::time::Duration;
    let client = |n: u8| Some(std::net::IpAddr::from([127, 0, 0, n]));
    // The setup (10,000 filters, a debug build, a busy host) must take
    // less: the polled filter is first polled after it, and nothing may
    // expire before the bound of all is checked.
    let timeout = Duration::from_secs(4);
    let chain = Chain::new(31337, config::DEFAULT_CHAIN_TX_BYTES).with_filter_timeout(timeout);
    let polled = chain
        .new_filter(FilterKind::Blocks, client(1))
        .unwrap()
        .to_string();
    let unpolled = chain
        .new_filter(FilterKind::Logs, client(1))
        .unwrap()
        .to_string();
    // One client fills its share and no more ...
    for _ in 2..MAX_FILTERS_PER_CLIENT {
        chain.new_filter(FilterKind::Blocks, client(1)).unwrap();
    }
    let refused = chain.new_filter(FilterKind::Blocks, client(1)).unwrap_err();
    assert_eq!(refused.code(), -32000);
    assert!(
        refused.message().starts_with(&format!(
            "too many filters: {MAX_FILTERS_PER_CLIENT} installed by this client"
        )),
        "{}",
        refused.message()
    );
    // ... the others theirs, up to the bound of all (IPC's clients count
    // as one).
    let others = [client(2), client(3), None];
    for owner in others {
        for _ in 0..MAX_FILTERS_PER_CLIENT {
            chain.new_filter(FilterKind::Blocks, owner).unwrap();
        }
    }
    assert_eq!(others.len() + 1, MAX_FILTERS / MAX_FILTERS_PER_CLIENT);
    let refused = chain.new_filter(FilterKind::Blocks, client(4)).unwrap_err();
    assert!(
        refused
            .message()
            .starts_with(&format!("too many filters: {MAX_FILTERS} installed (")),
        "{}",
        refused.message()
    );
    // Kept alive by polls (each well within the timeout); the other
    // filters are not polled, and pass their timeout.
    let started = std::time::Instant::now();
    while started.elapsed() < timeout + Duration::from_millis(500) {
        chain.mine_empty();
        let changes = chain.filter_changes(&polled).unwrap();
        assert!(changes.starts_with("[\"0x"), "{changes}");
        std::thread::sleep(timeout / 16);
    }
    assert_eq!(
        chain.filter_logs(&unpolled).unwrap_err().message(),
        "filter not found"
    );
    assert!(!chain.uninstall_filter(&unpolled));
    // The expired ones make room: the first client's share is free again
    // but for the filter it polled (each removal counted off its owner).
    let mut installed = 0;
    while chain
        .new_filter(FilterKind::PendingTransactions { full: false }, client(1))
        .is_ok()
    {
        installed += 1;
    }
    assert_eq!(installed, MAX_FILTERS_PER_CLIENT - 1);
    assert_eq!(chain.filter_changes(&polled).unwrap(), "[]");
    assert!(chain.uninstall_filter(&polled));
    assert!(chain.new_filter(FilterKind::Blocks, client(1)).is_ok());
    assert!(chain.new_filter(FilterKind::Blocks, client(4)).is_ok());
}

/// Filters are counted per client, and an IPv6 client is its /64 (one
/// host commonly holds a whole /64: counted by address, it could take
/// every filter from addresses of its own); an IPv4-mapped address is the
/// IPv4 client. Over the chain's API (the tests' connections are IPv4
/// loopback only).
#[test]
fn an_ipv6_client_is_counted_by_its_64() {
    use chain::{Chain, FilterKind, MAX_FILTERS_PER_CLIENT, client_of};
    use std::net::IpAddr;
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(client_of(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
    assert_eq!(client_of(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    assert_eq!(client_of(ip("192.0.2.7")), ip("192.0.2.7"));
    let chain = Chain::new(1, 1 << 20);
    for i in 0..MAX_FILTERS_PER_CLIENT {
        // A new address of the /64 for each.
        let from = ip(&format!("2001:db8:1:2::{:x}", i + 1));
        chain.new_filter(FilterKind::Blocks, Some(from)).unwrap();
    }
    let refused = chain
        .new_filter(FilterKind::Blocks, Some(ip("2001:db8:1:2:ffff::9")))
        .unwrap_err();
    assert!(
        refused.message().contains("by this client"),
        "{}",
        refused.message()
    );
    chain
        .new_filter(FilterKind::Blocks, Some(ip("2001:db8:1:3::1")))
        .expect("another /64 is another client");
}

/// A client creating filters in a loop fills its own share
/// ([`chain::MAX_FILTERS_PER_CLIENT`]), not the room all clients share:
/// another client (another address) still gets filters. Over HTTP, the
/// client known by its connection's address. The cap was one for all
/// clients. Found by a review.
#[tokio::test]
async fn one_client_s_filters_leave_room_for_the_others() {
    use chain::MAX_FILTERS_PER_CLIENT;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = start(config::Config::default()).await;
    // `body` POSTed from `from` (a loopback address); the reply, parsed.
    let post_from = |from: [u8; 4], body: String| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::from((from, 0)))
            .unwrap_or_else(|e| panic!("bind {from:?}: {e}"));
        let mut s = socket.connect(gw.addr).await.unwrap();
        let request = format!(
            "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).await.unwrap();
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str::<Value>(body).unwrap_or_else(|e| panic!("{e}: {body}"))
    };
    let filters = |n: usize| {
        let batch: Vec<Value> = (0..n)
            .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"eth_newBlockFilter"}))
            .collect();
        Value::from(batch).to_string()
    };
    let mut installed = 0;
    while installed < MAX_FILTERS_PER_CLIENT {
        let n = (MAX_FILTERS_PER_CLIENT - installed).min(1000);
        let replies = post_from([127, 0, 0, 1], filters(n)).await;
        for r in replies.as_array().unwrap() {
            assert!(r["result"].is_string(), "{r}");
        }
        installed += n;
    }
    let r = post_from([127, 0, 0, 1], filters(1)).await;
    assert_eq!(r[0]["error"]["code"], -32000, "{r}");
    let message = r[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("installed by this client"), "{message}");
    let r = post_from([127, 0, 0, 2], filters(1)).await;
    assert!(r[0]["result"].is_string(), "{r}");
    // Its filter works.
    let id = r[0]["result"].clone();
    let r = rpc(gw.addr, "eth_getFilterChanges", json!([id])).await;
    assert_eq!(r["result"], json!([]), "{r}");
}

/// `safe` and `finalized` lag the head as on anvil (32 and 64 blocks,
/// never before the genesis block): they were the head, so a client asking
/// for a finalized balance got the latest one. Found by a review (anvil
/// 1.7 at head 100: safe 68, finalized 36).
#[test]
fn safe_and_finalized_lag_the_head_as_on_anvil() {
    use rpcwire::eth::{BlockId, BlockTag};
    let chain = chain::Chain::new(31337, config::DEFAULT_CHAIN_TX_BYTES);
    let at = |tag| chain.check_block(BlockId::Tag(tag)).unwrap();
    for _ in 0..3 {
        chain.mine_empty();
    }
    assert_eq!((at(BlockTag::Safe), at(BlockTag::Finalized)), (0, 0));
    while chain.head() < 100 {
        chain.mine_empty();
    }
    assert_eq!(at(BlockTag::Latest), 100);
    assert_eq!((at(BlockTag::Safe), at(BlockTag::Finalized)), (68, 36));
    let finalized = chain
        .block_json(BlockId::Tag(BlockTag::Finalized), false)
        .unwrap();
    let finalized: Value = serde_json::from_str(&finalized).unwrap();
    assert_eq!(finalized["number"], "0x24");
}

/// Over the wire: a balance asked for at `finalized` is the one before
/// the transfers of the last blocks.
#[tokio::test]
async fn a_finalized_balance_is_the_one_before_recent_transfers() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let before = balance(a, address(5)).await;
    for nonce in 0..3 {
        let r = send(a, &sign(eip1559(nonce, address(6), 1), key(5))).await;
        assert!(r.get("result").is_some(), "{r}");
    }
    for tag in ["safe", "finalized"] {
        let block = rpc(a, "eth_getBlockByNumber", json!([tag, false])).await;
        assert_eq!(block["result"]["number"], "0x0", "{tag}: {block}");
        let at = rpc(a, "eth_getBalance", json!([address(5), tag])).await;
        assert_eq!(quantity(&at["result"]), before, "{tag}: {at}");
    }
    assert!(balance(a, address(5)).await < before);
}

/// `eth_getLogs` reads `safe` and `finalized` as the other methods do:
/// its own resolver still read them as the head, so a range from
/// `finalized` to an earlier block was refused as reversed. Found by the
/// review of this session's diff.
#[tokio::test]
async fn get_logs_resolves_tags_as_the_other_methods_do() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    for nonce in 0..3 {
        let r = send(a, &sign(eip1559(nonce, address(6), 1), key(5))).await;
        assert!(r.get("result").is_some(), "{r}");
    }
    for filter in [
        json!({"fromBlock": "finalized", "toBlock": "0x1"}),
        json!({"fromBlock": "earliest", "toBlock": "safe"}),
    ] {
        let r = rpc(a, "eth_getLogs", json!([filter])).await;
        assert_eq!(r["result"], json!([]), "{filter}: {r}");
    }
}

/// A call made for another chain is refused, as geth's `CallDefaults`
/// refuses it (and anvil, -32003): it was simulated as if for this one,
/// so a client set up for the wrong network saw a success. Found by a
/// review (differential against anvil).
#[tokio::test]
async fn a_call_for_another_chain_is_refused() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let to = Address::repeat_byte(1);
    for method in ["eth_call", "eth_estimateGas"] {
        let own = rpc(
            a,
            method,
            json!([{"to": to, "chainId": "0x7a69"}, "latest"]),
        )
        .await;
        assert!(own.get("result").is_some(), "{method}: {own}");
        let foreign = rpc(a, method, json!([{"to": to, "chainId": "0x1"}, "latest"])).await;
        assert_eq!(
            error(&foreign),
            (
                -32000,
                "chainId does not match node's (have=1, want=31337)".to_string()
            ),
            "{method}"
        );
        // In geth's order: after mixed fees, before the gas.
        let low = json!([{"to": to, "chainId": "0x1", "gas": "0x1"}, "latest"]);
        let r = rpc(a, method, low).await;
        assert!(
            error(&r).1.starts_with("chainId does not match"),
            "{method}: {r}"
        );
        let mixed = json!([{"to": to, "chainId": "0x1", "gasPrice": "0x1", "maxFeePerGas": "0x1"}]);
        let r = rpc(a, method, mixed).await;
        assert!(error(&r).1.starts_with("both gasPrice"), "{method}: {r}");
    }
}

/// `eth_feeHistory`'s `blockCount` is read as geth's `DecodeUint64` reads
/// it: no empty string (a QUANTITY's `""` is zero elsewhere); `0X4` is 4.
#[tokio::test]
async fn an_empty_fee_history_block_count_is_refused() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let r = rpc(a, "eth_feeHistory", json!(["", "latest"])).await;
    assert_eq!(error(&r).0, -32602, "{r}");
    let r = rpc(a, "eth_feeHistory", json!(["0X1", "latest"])).await;
    assert_eq!(
        r["result"]["gasUsedRatio"].as_array().map(Vec::len),
        Some(1),
        "{r}"
    );
}

/// Methods without params refuse one, as `eth_chainId` did already (and
/// geth and anvil, -32602): six answered `[1]` as if it were `[]`. Found by
/// a review.
#[tokio::test]
async fn methods_without_params_refuse_extra_params() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    for method in [
        "eth_chainId",
        "eth_blockNumber",
        "net_version",
        "eth_gasPrice",
        "eth_maxPriorityFeePerGas",
        "eth_accounts",
        "eth_syncing",
        "net_listening",
        "web3_clientVersion",
    ] {
        let r = rpc(a, method, json!([1])).await;
        assert_eq!(error(&r).0, -32602, "{method}: {r}");
        let r = rpc(a, method, json!([])).await;
        assert!(r.get("result").is_some(), "{method}: {r}");
    }
}

/// One `eth_getFilterChanges` answers at most `MAX_FILTER_CHANGES` items
/// of whole blocks; the rest come with the next poll, none lost or
/// repeated (a filter left unpolled rendered everything since under the
/// chain's one lock: with full transactions, up to ~17 MB). Found by a
/// read-only review of the built-in chain.
#[test]
fn filter_changes_come_in_bounded_polls_without_gaps() {
    use chain::{Chain, FilterKind, MAX_FILTER_CHANGES};
    let chain = Chain::new(1, 1 << 20);
    let id = chain
        .new_filter(FilterKind::Blocks, None)
        .unwrap()
        .to_string();
    let blocks = MAX_FILTER_CHANGES + 150;
    for _ in 0..blocks {
        chain.mine_empty();
    }
    let poll =
        || -> Vec<String> { serde_json::from_str(&chain.filter_changes(&id).unwrap()).unwrap() };
    let first = poll();
    assert_eq!(first.len(), MAX_FILTER_CHANGES);
    let second = poll();
    assert_eq!(second.len(), 150);
    assert!(poll().is_empty());
    let all: std::collections::HashSet<_> = first.iter().chain(&second).collect();
    assert_eq!(all.len(), blocks, "no hash repeated");
    chain.mine_empty();
    assert_eq!(poll().len(), 1, "the cursor at the head again");
}

/// Full transactions are capped by bytes too: large ones reach a megabyte
/// of JSON long before 1,000 items (up to the whole transaction budget,
/// twice over as hex, was rendered in one poll under the chain's lock).
#[test]
fn full_transaction_filter_changes_are_capped_by_bytes() {
    use chain::{Chain, FilterKind, MAX_FILTER_CHANGES_BYTES};
    let chain = Chain::new(31337, config::DEFAULT_CHAIN_TX_BYTES);
    let id = chain
        .new_filter(FilterKind::PendingTransactions { full: true }, None)
        .unwrap()
        .to_string();
    // Transfers with 64 KiB of input each (about 128 KiB of JSON).
    let sends = 12;
    for nonce in 0..sends {
        let tx = TxEip1559 {
            chain_id: 31337,
            nonce,
            gas_limit: 5_000_000,
            max_fee_per_gas: 3_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(address(1)),
            value: U256::from(1),
            input: ABytes::from(vec![1u8; 64 << 10]),
            ..Default::default()
        };
        let raw = sign(tx, key(0));
        let bytes = alloy_primitives::hex::decode(&raw[2..]).unwrap();
        chain.send_raw(&bytes).unwrap();
    }
    let first = chain.filter_changes(&id).unwrap();
    let first: Vec<Value> = serde_json::from_str(&first).unwrap();
    assert!(first.len() < sends as usize, "capped: {}", first.len());
    let room = MAX_FILTER_CHANGES_BYTES / (128 << 10) + 1;
    assert!(first.len() <= room, "{} transactions", first.len());
    let second: Vec<Value> = serde_json::from_str(&chain.filter_changes(&id).unwrap()).unwrap();
    let nonces: Vec<u64> = first
        .iter()
        .chain(&second)
        .map(|t| {
            u64::from_str_radix(t["nonce"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
        })
        .collect();
    assert_eq!(
        nonces,
        (0..sends).collect::<Vec<_>>(),
        "none lost or repeated"
    );
}

/// `eth_accounts` lists anvil's dev accounts, and `eth_sendTransaction`
/// from one is signed here with its key, as anvil does (web3.py's
/// `w3.eth.send_transaction({"from": w3.eth.accounts[0], ...})`; it was
/// -32601): defaults as geth's (the next nonce, the estimate's gas, an
/// EIP-1559 transaction at the suggested tip with a cap of twice the base
/// fee plus it), a `gasPrice` makes it legacy with the chain id, and the
/// raw transaction's checks and errors apply. Any other sender is
/// "unknown account".
#[tokio::test]
async fn dev_accounts_send_unsigned_transactions() {
    let gw = start(config::Config::default()).await;
    let listed = rpc(gw.addr, "eth_accounts", json!([])).await;
    let listed: Vec<Address> = serde_json::from_value(listed["result"].clone()).unwrap();
    assert_eq!(listed, (0..10).map(address).collect::<Vec<_>>());

    let to = Address::repeat_byte(0x51);
    let sent = |tx: Value| async move { rpc(gw.addr, "eth_sendTransaction", json!([tx])).await };
    // Defaults, twice: nonces 0 and 1.
    for (nonce, value) in [(0u64, 5u128), (1, 7)] {
        let r = sent(json!({"from": address(0), "to": to, "value": format!("{value:#x}")})).await;
        let hash = r["result"].as_str().unwrap_or_else(|| panic!("{r}"));
        let tx = rpc(gw.addr, "eth_getTransactionByHash", json!([hash])).await["result"].clone();
        assert_eq!(
            (
                &tx["from"],
                &tx["type"],
                &tx["nonce"],
                &tx["gas"],
                &tx["maxPriorityFeePerGas"],
                &tx["maxFeePerGas"],
                &tx["chainId"],
            ),
            (
                &json!(format!("{:#x}", address(0)).to_lowercase()),
                &json!("0x2"),
                &json!(format!("{nonce:#x}")),
                &json!("0x5208"),
                &json!("0x3b9aca00"),
                &json!("0xb2d05e00"),
                &json!("0x7a69"),
            ),
            "{tx}"
        );
        let receipt =
            rpc(gw.addr, "eth_getTransactionReceipt", json!([hash])).await["result"].clone();
        assert_eq!(receipt["status"], "0x1", "{receipt}");
    }
    assert_eq!(balance(gw.addr, to).await, 12);

    // A gas price: a legacy transaction, replay-protected (EIP-155).
    let r =
        sent(json!({"from": address(1), "to": to, "value": "0x1", "gasPrice": "0x77359400"})).await;
    let hash = r["result"].as_str().unwrap_or_else(|| panic!("{r}"));
    let tx = rpc(gw.addr, "eth_getTransactionByHash", json!([hash])).await["result"].clone();
    assert_eq!(
        (&tx["type"], &tx["gasPrice"], &tx["chainId"]),
        (&json!("0x0"), &json!("0x77359400"), &json!("0x7a69")),
        "{tx}"
    );
    assert_eq!(balance(gw.addr, to).await, 13);

    // An access list with a gas price: EIP-2930.
    let list = json!([{"address": Address::repeat_byte(0x22), "storageKeys": [B256::ZERO]}]);
    let r =
        sent(json!({"from": address(1), "to": to, "gasPrice": "0x77359400", "accessList": list}))
            .await;
    let hash = r["result"].as_str().unwrap_or_else(|| panic!("{r}"));
    let tx = rpc(gw.addr, "eth_getTransactionByHash", json!([hash])).await["result"].clone();
    assert_eq!(
        (&tx["type"], &tx["gas"], &tx["accessList"]),
        (
            &json!("0x1"),
            &json!(format!("{:#x}", 21_000 + 2_400 + 1_900)),
            &list
        ),
        "{tx}"
    );
    // A tip alone: the cap is twice the base fee plus it.
    let r = sent(json!({"from": address(3), "to": to, "maxPriorityFeePerGas": "0x2"})).await;
    let hash = r["result"].as_str().unwrap_or_else(|| panic!("{r}"));
    let tx = rpc(gw.addr, "eth_getTransactionByHash", json!([hash])).await["result"].clone();
    assert_eq!(tx["maxFeePerGas"], json!("0x77359402"), "{tx}");
    // A type that disagrees with the fields, and types it does not take.
    for (tx, reason) in [
        (
            json!({"type": "0x2", "gasPrice": "0x1"}),
            "transaction type 2 does not take gasPrice",
        ),
        (
            json!({"type": "0x0", "accessList": []}),
            "transaction type 0 does not take accessList",
        ),
        (
            json!({"type": "0x1", "maxFeePerGas": "0x77359400"}),
            "transaction type 1 does not take EIP-1559 fees",
        ),
    ] {
        let mut tx = tx;
        tx["from"] = json!(address(3));
        tx["to"] = json!(to);
        let r = sent(tx).await;
        assert_eq!(error(&r), (-32602, reason.to_string()), "{r}");
    }
    let r = sent(json!({"from": address(3), "to": to, "authorizationList": []})).await;
    assert_eq!(
        error(&r).1,
        "transaction type not supported by the built-in chain: 4",
        "{r}"
    );
    // A type that would drop them: refused, not signed without them.
    let r =
        sent(json!({"from": address(3), "to": to, "type": "0x2", "authorizationList": []})).await;
    assert_eq!(
        error(&r),
        (
            -32602,
            "transaction type 2 does not take authorizationList".to_string()
        ),
        "{r}"
    );
    let r = sent(
        json!({"from": address(3), "to": to, "type": "0x2", "blobVersionedHashes": [B256::ZERO]}),
    )
    .await;
    assert_eq!(
        error(&r),
        (
            -32602,
            "transaction type 2 does not take blobVersionedHashes".to_string()
        ),
        "{r}"
    );
    // Eight sent at once from one account: eight nonces, eight blocks
    // (this gateway has one worker; two workers racing for a nonce:
    // `sends_at_once_on_several_workers_take_nonces_in_turn`).
    let at_once = (0..8).map(|_| sent(json!({"from": address(4), "to": to, "value": "0x1"})));
    for r in futures_util::future::join_all(at_once).await {
        assert!(r["result"].is_string(), "{r}");
    }
    let count = rpc(
        gw.addr,
        "eth_getTransactionCount",
        json!([address(4), "latest"]),
    )
    .await;
    assert_eq!(count["result"], "0x8", "{count}");
    assert_eq!(balance(gw.addr, to).await, 13 + 8);

    // The raw transaction's checks: a nonce already used, more than the
    // balance; and no EVM, no other sender.
    let r = sent(json!({"from": address(0), "to": to, "nonce": "0x0"})).await;
    assert!(error(&r).1.starts_with("nonce too low"), "{r}");
    let r = sent(json!({"from": address(2), "to": to, "value": "0xffffffffffffffffffffffffffff"}))
        .await;
    assert!(
        error(&r)
            .1
            .starts_with("insufficient funds for gas * price + value"),
        "{r}"
    );
    let r = sent(json!({"from": address(2), "data": "0x6000"})).await;
    assert!(
        error(&r)
            .1
            .starts_with("contract creation and execution are not supported"),
        "{r}"
    );
    for from in [json!(Address::repeat_byte(9)), Value::Null] {
        let r = sent(json!({"from": from, "to": to})).await;
        assert_eq!(error(&r), (-32000, "unknown account".to_string()), "{r}");
    }
    // Nothing of these was mined: a block for each transfer taken.
    let head = rpc(gw.addr, "eth_blockNumber", json!([])).await;
    assert_eq!(head["result"], format!("{:#x}", 3 + 2 + 8), "{head}");
}

/// `eth_createAccessList` (`cast access-list`, viem's `createAccessList`;
/// it was -32601): an empty list and the call's gas for a transfer, the
/// list given kept (sender, callee and precompiles too) with its gas, as
/// anvil answered the same requests (its list in another order); an
/// address given twice is listed once with both keys (anvil keeps the
/// last entry's keys, geth the union); the call is checked as `eth_call`.
#[tokio::test]
async fn access_lists_are_created_as_anvil_creates_them() {
    let gw = start(config::Config::default()).await;
    let ask = |tx: Value| async move {
        let r = rpc(gw.addr, "eth_createAccessList", json!([tx, "latest"])).await;
        let result = r["result"].clone();
        assert!(result.is_object(), "{r}");
        let mut list: Vec<String> = result["accessList"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item.to_string())
            .collect();
        list.sort();
        (list, result["gasUsed"].as_str().unwrap().to_string())
    };
    let (from, to) = (address(0), address(1));
    let key = |n: u8| B256::with_last_byte(n);
    let entry = |a: Address, keys: &[B256]| json!({"address": a, "storageKeys": keys});
    assert_eq!(
        ask(json!({"from": from, "to": to, "value": "0x1"})).await,
        (vec![], "0x5208".to_string())
    );
    assert_eq!(
        ask(json!({"from": from, "to": to, "data": "0x00ff00ff"})).await,
        (vec![], "0x526c".to_string())
    );
    let other = Address::repeat_byte(0x11);
    let precompile = Address::with_last_byte(1);
    let given = [
        entry(other, &[key(1)]),
        entry(from, &[]),
        entry(precompile, &[]),
        entry(to, &[key(5)]),
    ];
    let mut want: Vec<String> = given
        .iter()
        .map(|e| {
            json!({"address": format!("{:#x}", e["address"].as_str().unwrap().parse::<Address>().unwrap()), "storageKeys": e["storageKeys"]})
                .to_string()
        })
        .collect();
    want.sort();
    assert_eq!(
        ask(json!({"from": from, "to": to, "data": "0x0001", "accessList": given})).await,
        (want, "0x8674".to_string())
    );
    let twice = [entry(other, &[key(1), key(1)]), entry(other, &[key(2)])];
    let (list, gas) = ask(json!({"from": from, "to": to, "accessList": twice})).await;
    assert_eq!(
        list,
        [json!({"address": format!("{other:#x}"), "storageKeys": [key(1), key(2)]}).to_string()]
    );
    assert_eq!(gas, format!("{:#x}", 21_000 + 2_400 + 2 * 1_900));
    // As eth_call: funds, no code.
    let r = rpc(
        gw.addr,
        "eth_createAccessList",
        json!([{"from": from, "to": to, "value": "0xffffffffffffffffffffffffffffffffff"}]),
    )
    .await;
    assert!(
        error(&r)
            .1
            .starts_with("insufficient funds for gas * price + value"),
        "{r}"
    );
    let r = rpc(
        gw.addr,
        "eth_createAccessList",
        json!([{"from": from, "data": "0x60"}]),
    )
    .await;
    assert!(
        error(&r)
            .1
            .starts_with("contract creation and execution are not supported"),
        "{r}"
    );
}

/// `eth_sendTransaction`s from one account at once on the gateway's
/// several workers each take a nonce of their own: the nonce is chosen
/// under the chain's signing lock (without it two read the same next
/// nonce and the second was refused "nonce too low", where geth's nonce
/// lock serialises them; found by a review).
#[tokio::test]
async fn sends_at_once_on_several_workers_take_nonces_in_turn() {
    let gw = crate::gateway_child::GatewayChild::start(2, &[]).await;
    let addr = gw.listening.expect("listening");
    let to = Address::repeat_byte(0x52);
    let sends = (0..32).map(|_| async move {
        rpc(
            addr,
            "eth_sendTransaction",
            json!([{"from": address(5), "to": to, "value": "0x1"}]),
        )
        .await
    });
    for r in futures_util::future::join_all(sends).await {
        assert!(r["result"].is_string(), "{r}");
    }
    let count = rpc(
        addr,
        "eth_getTransactionCount",
        json!([address(5), "latest"]),
    )
    .await;
    assert_eq!(count["result"], "0x20", "{count}");
}
