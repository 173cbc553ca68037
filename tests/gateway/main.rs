//! The gateway example's tests (`examples/gateway`): one test binary, its
//! modules compiled into it once. As nine binaries, eight compiled the
//! example's 7,500 lines again, more than a quarter of the test suite's
//! build.
//! Everything on 127.0.0.1, every server started and stopped by its test.
//!
//! The soak that reads the whole process's heap is a binary of its own
//! (`tests/gateway_leaks.rs`): other tests running beside it would move
//! its counts. The counting allocator here only serves the cache's
//! per-thread bound ([`response_cache`]).
#![allow(dead_code)]

include!("../support/gateway_example.rs");

#[path = "../support/counting_alloc.rs"]
mod counting_alloc;
#[path = "../support/eventually.rs"]
mod eventually;
#[path = "../support/example_binary.rs"]
mod example_binary;
#[path = "../support/gateway_child.rs"]
mod gateway_child;
#[path = "../support/http_request.rs"]
mod http_request;
#[cfg(target_os = "linux")]
#[path = "../support/proc_tcp.rs"]
mod proc_tcp;
#[path = "../support/refusing.rs"]
mod refusing;

#[global_allocator]
static ALLOC: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

mod abandoned_calls;
mod archive_routing;
mod built_in_chain;
mod forwarding;
mod hostile_inputs;
#[cfg(unix)]
mod ipc;
mod operations;
mod response_cache;
mod ws_relay;
mod ws_upstream;

// The built-in chain's dev accounts (anvil's), and transactions signed
// with their keys (tests/gateway/forwarding.rs, built_in_chain.rs).

fn key(i: usize) -> alloy_primitives::B256 {
    chain::DEV_ACCOUNTS[i].1.parse().unwrap()
}

fn address(i: usize) -> alloy_primitives::Address {
    chain::DEV_ACCOUNTS[i].0.parse().unwrap()
}

/// `tx` signed with `key`, in the 2718 encoding `eth_sendRawTransaction`
/// takes, as `0x` hex.
fn sign<T>(tx: T, key: alloy_primitives::B256) -> String
where
    T: alloy_consensus::SignableTransaction<alloy_primitives::Signature>,
    alloy_consensus::TxEnvelope: From<alloy_consensus::Signed<T>>,
{
    use alloy_eips::eip2718::Encodable2718;
    let sig = alloy_consensus::crypto::secp256k1::sign_message(key, tx.signature_hash()).unwrap();
    let envelope = alloy_consensus::TxEnvelope::from(tx.into_signed(sig));
    format!(
        "0x{}",
        alloy_primitives::hex::encode(envelope.encoded_2718())
    )
}

/// A value transfer of 21,000 gas at 3 gwei (1 gwei of tip).
fn eip1559(
    nonce: u64,
    to: alloy_primitives::Address,
    value: u128,
    chain_id: u64,
) -> alloy_consensus::TxEip1559 {
    alloy_consensus::TxEip1559 {
        chain_id,
        nonce,
        gas_limit: 21_000,
        max_fee_per_gas: 3_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: alloy_primitives::TxKind::Call(to),
        value: alloy_primitives::U256::from(value),
        access_list: Default::default(),
        input: alloy_primitives::Bytes::new(),
    }
}
