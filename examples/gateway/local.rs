//! The built-in chain's methods: synchronous handlers over [`Chain`], the
//! params read in place with rpcwire's Ethereum decoders.

use std::collections::HashMap;
use std::sync::Arc;

use rpcwire::codes::METHOD_NOT_FOUND;
use rpcwire::dispatch::{DispatcherBuilder, Done, Observer, SyncOnly};
use rpcwire::eth::codes::server_error;
use rpcwire::eth::{
    BlockId, BlockNumberOrTag, BlockTag, CallRequest, EthParams, EthReply, LogFilter, TopicFilter,
    U256,
};
use rpcwire::json::Kind;
use rpcwire::server::subscriptions::Subscriptions;
use rpcwire::{Call, Dispatcher, RpcError};

use crate::chain::{self, Chain, FilterKind, PRIORITY_FEE, calldata_gas, raw};
use crate::config::Config;
use alloy_consensus::{SignableTransaction, TxEip1559, TxEip2930, TxEnvelope, TxLegacy};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_primitives::{Address, B256, Bytes, TxKind};

type C<'a> = Call<'a, Arc<Chain>>;
type Answer = Result<Done, RpcError>;

const LATEST: BlockId = BlockId::Tag(BlockTag::Latest);

fn block_or_latest(p: &mut EthParams<'_>) -> Result<BlockId, RpcError> {
    Ok(match p.optional("blockNumber") {
        Some(b) => b.block_id()?,
        None => LATEST,
    })
}

fn chain_id(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.quantity(c.state.chain_id() as u128)
}

fn net_version(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.str(&c.state.chain_id().to_string())
}

fn client_version(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.str(concat!(
        "rpcwire-gateway/v",
        env!("CARGO_PKG_VERSION"),
        "/built-in-chain"
    ))
}

fn block_number(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.quantity(c.state.head() as u128)
}

fn get_balance(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let address = p.required("address")?.address()?;
    let block = block_or_latest(&mut p)?;
    p.finish()?;
    let (balance, _) = c.state.account(address, block)?;
    EthReply::quantity_u256(c.reply, balance)
}

fn get_transaction_count(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let address = p.required("address")?.address()?;
    let block = block_or_latest(&mut p)?;
    p.finish()?;
    let (_, nonce) = c.state.account(address, block)?;
    c.reply.quantity(nonce as u128)
}

fn gas_price(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.quantity(chain::BASE_FEE as u128 + PRIORITY_FEE)
}

fn max_priority_fee(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.quantity(PRIORITY_FEE)
}

/// The most reward percentiles one `eth_feeHistory` may ask for (geth's
/// `maxQueryLimit`).
const MAX_REWARD_PERCENTILES: usize = 100;

fn fee_history(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let count = p.required("blockCount")?;
    // A QUANTITY, or (geth's `DecimalOrHex`) a plain number or a string of
    // decimal digits.
    let decimal = count
        .value()
        .as_str()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok());
    let count = match count.value().as_u64().or(decimal) {
        Some(n) => n,
        // geth's `DecodeUint64`: no empty string (a QUANTITY's zero).
        None if count.value().as_str() == Some("") => {
            return Err(RpcError::invalid_params("blockCount: empty hex string"));
        }
        None => count.quantity_u64()?,
    };
    let newest = p.required("newestBlock")?.block_number()?;
    let percentiles: Vec<f64> = match p.optional("rewardPercentiles") {
        Some(v) => serde_json::from_str(v.value().as_json())
            .map_err(|_| RpcError::invalid_params("rewardPercentiles: an array of numbers"))?,
        None => Vec::new(),
    };
    // geth's bound: the answer holds a reward per block and percentile,
    // built whole under the chain's lock.
    if percentiles.len() > MAX_REWARD_PERCENTILES {
        return Err(RpcError::invalid_params(format!(
            "invalid reward percentile: over the query limit {MAX_REWARD_PERCENTILES}"
        )));
    }
    // geth's rule (each in [0, 100], increasing), with equal neighbours
    // allowed as reth and anvil allow them.
    for (i, &p) in percentiles.iter().enumerate() {
        if !(0.0..=100.0).contains(&p) {
            return Err(RpcError::invalid_params(format!(
                "invalid reward percentile: {p} (each must be in [0, 100])"
            )));
        }
        if i > 0 && p < percentiles[i - 1] {
            return Err(RpcError::invalid_params(format!(
                "invalid reward percentile: #{}:{} > #{i}:{p} (they must not decrease)",
                i - 1,
                percentiles[i - 1]
            )));
        }
    }
    p.finish()?;
    raw(c.reply, &c.state.fee_history(count, newest, &percentiles)?)
}

/// A call's access list, each entry checked (an address, 32-byte keys);
/// `None` when it has none.
fn access_list(call: &CallRequest<'_>) -> Result<Option<AccessList>, RpcError> {
    #[derive(serde::Deserialize)]
    struct Item {
        address: alloy_primitives::Address,
        #[serde(rename = "storageKeys", default)]
        storage_keys: Vec<alloy_primitives::B256>,
    }
    let Some(raw) = call.access_list() else {
        return Ok(None);
    };
    let items: Vec<Item> = serde_json::from_slice(raw.as_bytes())
        .map_err(|e| RpcError::invalid_params(format!("accessList: {e}")))?;
    Ok(Some(AccessList(
        items
            .into_iter()
            .map(|item| AccessListItem {
                address: item.address,
                storage_keys: item.storage_keys,
            })
            .collect(),
    )))
}

/// The storage-key count of each address of a call's access list.
fn access_list_keys(call: &CallRequest<'_>) -> Result<Vec<usize>, RpcError> {
    Ok(access_list(call)?.map_or_else(Vec::new, |list| {
        list.0.iter().map(|item| item.storage_keys.len()).collect()
    }))
}

/// The gas a call to an account without code uses: its intrinsic gas (its
/// access list counted too, as in the transaction it stands for), or
/// Prague's calldata floor when that is more, as the chain charges it.
fn call_gas(call: &CallRequest<'_>, input: &[u8]) -> Result<u64, RpcError> {
    Ok(gas_with(input, access_list_keys(call)?))
}

/// The gas a call with `input` and an access list of `keys` storage keys
/// per address uses: its intrinsic gas, or the calldata floor when more.
fn gas_with(input: &[u8], keys: impl IntoIterator<Item = usize>) -> u64 {
    calldata_gas(input, keys).max(chain::floor_gas(input))
}

/// geth's `CallDefaults` checks (`eth_call`, `eth_estimateGas`,
/// `eth_sendTransaction`): a gas price and the EIP-1559 fields are not
/// both given, and a `chainId` is this chain's. Returns the fees given.
fn check_fee_fields(call: &CallRequest<'_>, chain_id: u64) -> Result<Fees, RpcError> {
    let price = call.gas_price()?;
    let (tip, cap) = (call.max_priority_fee_per_gas()?, call.max_fee_per_gas()?);
    if price.is_some() && (tip.is_some() || cap.is_some()) {
        return Err(server_error(
            "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified",
        ));
    }
    if let Some(have) = call.chain_id()?
        && have != chain_id
    {
        return Err(server_error(format!(
            "chainId does not match node's (have={have}, want={chain_id})"
        )));
    }
    Ok(Fees { price, tip, cap })
}

/// A call's fee fields as given: `gasPrice`, `maxPriorityFeePerGas`,
/// `maxFeePerGas`.
struct Fees {
    price: Option<u128>,
    tip: Option<u128>,
    cap: Option<u128>,
}

/// geth's checks of a call's fees and chain (`eth_call`,
/// `eth_estimateGas`), in its order: a gas price and the EIP-1559 fields
/// are not both given; a `chainId` is this chain's (a call made for
/// another is refused, not simulated here); and when any fee is given
/// (geth skips the checks for a call with none), the tip may not exceed
/// the fee cap and the fee cap (a gas price is both) may not be under the
/// block's base fee, as a transaction sent would be refused.
fn check_fees(call: &CallRequest<'_>, chain_id: u64) -> Result<(), RpcError> {
    let Fees { price, tip, cap } = check_fee_fields(call, chain_id)?;
    let (tip, cap) = match price {
        Some(price) => (price, price),
        None => (tip.unwrap_or(0), cap.unwrap_or(0)),
    };
    if tip == 0 && cap == 0 {
        return Ok(());
    }
    let from = call.from()?.unwrap_or_default();
    if tip > cap {
        return Err(server_error(format!(
            "max priority fee per gas higher than max fee per gas: address {from}, maxPriorityFeePerGas: {tip}, maxFeePerGas: {cap}"
        )));
    }
    if cap < u128::from(chain::BASE_FEE) {
        return Err(server_error(format!(
            "max fee per gas less than block base fee: address {from}, maxFeePerGas: {cap}, baseFee: {}",
            chain::BASE_FEE
        )));
    }
    Ok(())
}

fn estimate_gas(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let call = p.required("transaction")?.call_request()?;
    let block = block_or_latest(&mut p)?;
    let overrides = read_overrides(&mut p)?;
    p.finish()?;
    let Some(to) = call.to()? else {
        return Err(no_evm());
    };
    check_no_code(&overrides, to)?;
    c.state.check_block(block)?;
    check_fees(&call, c.state.chain_id())?;
    // What a send of it would refuse, the estimate refuses too: an estimate
    // for a blob or set-code transaction was answered, and its send then
    // refused.
    let kind = match call.tx_type()? {
        Some(kind) => kind,
        None if call.authorization_list().is_some() => 4,
        None if call.blob_versioned_hashes()?.next().is_some() => 3,
        None => 0,
    };
    if kind > 2 {
        return Err(server_error(format!(
            "transaction type not supported by the built-in chain: {kind}"
        )));
    }
    // The most the estimate may answer, as geth's estimator bounds it: a
    // gas limit given, the per-transaction cap (EIP-7825), and with a fee
    // cap what the sender's balance pays for past the value (an estimate
    // that the send then refused for its fee was answered).
    // A gas limit under a transfer's is not one (geth's estimator takes
    // the block's limit then).
    let mut allowance = call
        .gas()?
        .filter(|&g| g >= chain::TRANSFER_GAS)
        .unwrap_or(u64::MAX)
        .min(chain::MAX_TX_GAS);
    let fee_cap = match call.gas_price()? {
        Some(price) => Some(price),
        None => call.max_fee_per_gas()?,
    }
    .filter(|&cap| cap > 0);
    // Without `from`, the zero address pays, as in `eth_call` (and geth's
    // estimator, whose attempts then fail on its balance).
    {
        let from = call.from()?.unwrap_or_default();
        let balance = balance_of(&c, &overrides, from, block)?;
        let given = call.value()?;
        let value = given.unwrap_or_default();
        // With a fee cap a value given must leave something for the fee.
        if balance < value || (fee_cap.is_some() && given.is_some() && balance == value) {
            return Err(server_error("insufficient funds for transfer"));
        }
        if let Some(cap) = fee_cap {
            let paid_for = (balance - value) / U256::from(cap);
            allowance = allowance.min(u64::try_from(paid_for).unwrap_or(u64::MAX));
        }
    }
    let input = call.input_in(c.arena)?.unwrap_or_default();
    let gas = call_gas(&call, input)?;
    if allowance < gas {
        return Err(server_error(format!(
            "gas required exceeds allowance ({allowance})"
        )));
    }
    c.reply.quantity(gas as u128)
}

fn no_evm() -> RpcError {
    server_error(
        "contract creation and execution are not supported by the built-in chain (it has no EVM; value transfers only)",
    )
}

/// One account's entry in `eth_call`'s state overrides (geth's fields;
/// each read so that a malformed one is refused).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AccountOverride {
    balance: Option<U256>,
    code: Option<alloy_primitives::Bytes>,
    #[serde(rename = "nonce")]
    _nonce: Option<alloy_primitives::U64>,
    #[serde(rename = "state")]
    _state: Option<HashMap<alloy_primitives::B256, alloy_primitives::B256>>,
    #[serde(rename = "stateDiff")]
    _state_diff: Option<HashMap<alloy_primitives::B256, alloy_primitives::B256>>,
    #[serde(rename = "movePrecompileToAddress")]
    _move_precompile_to_address: Option<alloy_primitives::Address>,
}

type Overrides = HashMap<alloy_primitives::Address, AccountOverride>;

/// The optional state overrides and block overrides that follow the block
/// of `eth_call` and `eth_estimateGas`: the first read, the second checked
/// to be an object (nothing it changes matters to a call that runs no
/// code).
fn read_overrides(p: &mut EthParams<'_>) -> Result<Overrides, RpcError> {
    let overrides = match p.optional("stateOverrides") {
        Some(v) => serde_json::from_str(v.value().as_json())
            .map_err(|e| RpcError::invalid_params(format!("stateOverrides: {e}")))?,
        None => HashMap::new(),
    };
    if let Some(v) = p.optional("blockOverrides")
        && v.value().kind() != Kind::Object
    {
        return Err(RpcError::invalid_params("blockOverrides: an object"));
    }
    Ok(overrides)
}

/// Code given to the callee would run: the no-EVM error; so would a
/// precompile.
fn check_no_code(overrides: &Overrides, to: alloy_primitives::Address) -> Result<(), RpcError> {
    chain::check_not_precompile(to)?;
    if overrides
        .get(&to)
        .and_then(|o| o.code.as_ref())
        .is_some_and(|code| !code.is_empty())
    {
        return Err(no_evm());
    }
    Ok(())
}

/// `who`'s balance at `block`, or its override.
fn balance_of(
    c: &C<'_>,
    overrides: &Overrides,
    who: alloy_primitives::Address,
    block: BlockId,
) -> Result<U256, RpcError> {
    match overrides.get(&who).and_then(|o| o.balance) {
        Some(balance) => Ok(balance),
        None => Ok(c.state.account(who, block)?.0),
    }
}

/// `eth_call`: every account is externally owned, so a call runs no code
/// and answers `0x`, once it passes what geth checks before running one:
/// the gas limit covers the intrinsic gas and the calldata floor, the tip
/// is at most the fee cap, and the sender (the zero address when `from` is
/// absent, as in geth) can pay `value + gas × price` at `block` (no gas
/// charged without a price; without a gas limit, the gas the call uses).
/// State overrides count: a balance override is the sender's balance, and
/// code given to the callee is refused (it would run). Block overrides are
/// taken and change nothing here.
fn call(c: C<'_>) -> Answer {
    checked_call(&c)?;
    c.reply.data(&[])
}

/// `eth_createAccessList` for a call that touches no storage and no
/// account but its sender and callee: the list given (none: an empty
/// one), each address once with the union of its keys, each key once
/// (geth's merge; anvil keeps an address's last entry), keeping the
/// sender, the callee and precompiles listed as anvil's tracer does (geth
/// leaves them out), and the gas the call uses with that list; the call
/// checked as `eth_call` checks it (what `cast access-list`, `cast send
/// --access-list` and viem's `createAccessList` ask).
fn create_access_list(c: C<'_>) -> Answer {
    let call = checked_call(&c)?;
    let mut merged: Vec<(Address, Vec<B256>)> = Vec::new();
    let mut at: HashMap<Address, usize> = HashMap::new();
    let mut seen: std::collections::HashSet<(Address, B256)> = Default::default();
    for item in access_list(&call)?.unwrap_or_default().0 {
        let i = *at.entry(item.address).or_insert_with(|| {
            merged.push((item.address, Vec::new()));
            merged.len() - 1
        });
        for key in item.storage_keys {
            if seen.insert((item.address, key)) {
                merged[i].1.push(key);
            }
        }
    }
    let input = call.input_in(c.arena)?.unwrap_or_default();
    let gas = gas_with(input, merged.iter().map(|(_, keys)| keys.len()));
    let mut out = String::from(r#"{"accessList":["#);
    for (i, (address, keys)) in merged.iter().enumerate() {
        let keys: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
        out.push_str(&format!(
            r#"{}{{"address":"{address:#x}","storageKeys":[{}]}}"#,
            if i > 0 { "," } else { "" },
            keys.join(",")
        ));
    }
    out.push_str(&format!(r#"],"gasUsed":"{gas:#x}"}}"#));
    c.reply.raw(out.as_bytes())
}

/// The checks of [`call`] on the call in `c`'s params; the call.
fn checked_call<'a>(c: &C<'a>) -> Result<CallRequest<'a>, RpcError> {
    let mut p = EthParams::new(c.params);
    let call = p.required("transaction")?.call_request()?;
    let block = block_or_latest(&mut p)?;
    let overrides = read_overrides(&mut p)?;
    p.finish()?;
    let Some(to) = call.to()? else {
        return Err(no_evm());
    };
    check_no_code(&overrides, to)?;
    c.state.check_block(block)?;
    // geth's order: its `CallDefaults` (mixed fees, chainId), its fee
    // checks, then the gas.
    check_fees(&call, c.state.chain_id())?;
    let input = call.input_in(c.arena)?.unwrap_or_default();
    let keys = access_list_keys(&call)?;
    let intrinsic = calldata_gas(input, keys);
    let floor = chain::floor_gas(input);
    if let Some(gas) = call.gas()? {
        if gas < intrinsic {
            return Err(server_error(format!(
                "intrinsic gas too low: have {gas}, want {intrinsic}"
            )));
        }
        if gas < floor {
            return Err(server_error(format!(
                "insufficient gas for floor data gas cost: have {gas}, want {floor}"
            )));
        }
    }
    let price = match call.gas_price()? {
        Some(price) => price,
        None => call.max_fee_per_gas()?.unwrap_or(0),
    };
    let gas = call.gas()?.unwrap_or(intrinsic.max(floor));
    let value = call.value()?.unwrap_or_default();
    // Checked: a value near 2^256 must not wrap the sum.
    let cost = U256::from(gas)
        .checked_mul(U256::from(price))
        .and_then(|fee| fee.checked_add(value));
    if cost != Some(U256::ZERO) {
        let from = call.from()?.unwrap_or_default();
        let balance = balance_of(c, &overrides, from, block)?;
        if cost.is_none_or(|cost| balance < cost) {
            let want = cost.map_or_else(|| "more than 2^256".to_string(), |c| c.to_string());
            return Err(server_error(format!(
                "insufficient funds for gas * price + value: address {from} have {balance} want {want}"
            )));
        }
    }
    Ok(call)
}

fn get_code(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    p.required("address")?.address()?;
    let block = block_or_latest(&mut p)?;
    p.finish()?;
    c.state.check_block(block)?;
    c.reply.data(&[])
}

/// Every slot of every account reads zero: no contract can be deployed
/// (no EVM), and a transfer writes no storage.
fn get_storage_at(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    p.required("address")?.address()?;
    p.required("storageSlot")?.storage_key()?;
    let block = block_or_latest(&mut p)?;
    p.finish()?;
    c.state.check_block(block)?;
    c.reply.raw(ZERO_WORD)
}

/// A storage slot's zero value, as geth writes it: 32 bytes.
const ZERO_WORD: &[u8] = b"\"0x0000000000000000000000000000000000000000000000000000000000000000\"";

fn get_block_by_number(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let block = p.required("blockNumber")?.block_number()?;
    let full = p.required("hydrated")?.boolean()?;
    p.finish()?;
    match c.state.block_json(block.into(), full) {
        Some(json) => raw(c.reply, &json),
        None => c.reply.null(),
    }
}

fn get_block_by_hash(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let hash = p.required("blockHash")?.hash()?;
    let full = p.required("hydrated")?.boolean()?;
    p.finish()?;
    let block = BlockId::Hash {
        hash,
        require_canonical: None,
    };
    match c.state.block_json(block, full) {
        Some(json) => raw(c.reply, &json),
        None => c.reply.null(),
    }
}

fn get_transaction_by_hash(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let hash = p.required("transactionHash")?.hash()?;
    p.finish()?;
    match c.state.tx_json(hash) {
        Some(json) => raw(c.reply, &json),
        None => c.reply.null(),
    }
}

fn get_transaction_receipt(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let hash = p.required("transactionHash")?.hash()?;
    p.finish()?;
    match c.state.receipt_json(hash) {
        Some(json) => raw(c.reply, &json),
        None => c.reply.null(),
    }
}

fn get_logs(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let filter = p.required("filter")?.log_filter()?;
    p.finish()?;
    let head = c.state.head();
    if let Some(hash) = filter.block_hash()? {
        if !c.state.has_block_hash(hash) {
            return Err(server_error("unknown block"));
        }
    } else {
        let number = |b: Option<BlockNumberOrTag>| match b {
            Some(BlockNumberOrTag::Number(n)) => n,
            Some(BlockNumberOrTag::Tag(tag)) => crate::chain::tag_number(tag, head),
            None => head,
        };
        let (from_block, to_block) = (filter.from_block()?, filter.to_block()?);
        // As the execution-apis conformance tests (eth_getLogs/filter-error-*)
        // answer: two numbers in reverse order, -32000; a `toBlock` past the
        // head, -32602 (those blocks do not exist, they do not lack logs);
        // a range reversed once tags are resolved, -32602.
        if let (Some(BlockNumberOrTag::Number(from)), Some(BlockNumberOrTag::Number(to))) =
            (from_block, to_block)
            && from > to
        {
            return Err(server_error("invalid block range params"));
        }
        let (from, to) = (number(from_block), number(to_block));
        if to > head {
            return Err(RpcError::invalid_params(
                "block range extends beyond current head block",
            ));
        }
        if from > to {
            return Err(RpcError::invalid_params("invalid block range params"));
        }
    }
    read_addresses_and_topics(&filter)?;
    // Value transfers emit no logs.
    c.reply.raw(b"[]")
}

/// Reads every address and topic of a log filter (the decoders are lazy):
/// a malformed one, or a fifth topic position, is -32602 even with no logs
/// to match.
fn read_addresses_and_topics(filter: &LogFilter<'_>) -> Result<(), RpcError> {
    for address in filter.addresses()? {
        address?;
    }
    for topic in filter.topics()? {
        if let TopicFilter::AnyOf(alternatives) = topic? {
            for t in alternatives {
                t?;
            }
        }
    }
    Ok(())
}

/// A log filter for `eth_newFilter` or a `logs` subscription, checked as
/// geth checks one: its addresses and topics, and two block numbers in
/// reverse order refused (a range past the head is not: it is waited for).
fn read_log_filter(filter: &LogFilter<'_>) -> Result<(), RpcError> {
    if let (Some(BlockNumberOrTag::Number(from)), Some(BlockNumberOrTag::Number(to))) =
        (filter.from_block()?, filter.to_block()?)
        && from > to
    {
        return Err(server_error("invalid from and to block combination"));
    }
    read_addresses_and_topics(filter)
}

/// geth's optional `fullTx` (`newPendingTransactions` filters and
/// subscriptions): whole transactions rather than hashes.
fn full_tx(p: &mut EthParams<'_>) -> Result<bool, RpcError> {
    let full = p.optional("fullTx").map(|v| v.boolean()).transpose()?;
    Ok(full.unwrap_or(false))
}

/// Installs a filter of `kind` and answers its id.
fn install_filter(c: C<'_>, kind: FilterKind) -> Answer {
    let owner = c.ctx.peer_addr().map(|a| a.ip());
    let id = c.state.new_filter(kind, owner)?;
    c.reply.str(&id.to_string())
}

fn new_block_filter(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    install_filter(c, FilterKind::Blocks)
}

/// `eth_newPendingTransactionFilter`, with geth's optional `fullTx`.
fn new_pending_transaction_filter(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let full = full_tx(&mut p)?;
    p.finish()?;
    install_filter(c, FilterKind::PendingTransactions { full })
}

fn new_filter(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let filter = p.required("filter")?.log_filter()?;
    p.finish()?;
    read_log_filter(&filter)?;
    install_filter(c, FilterKind::Logs)
}

/// The one parameter of the filter methods: a filter id (a string; one
/// naming no filter is geth's "filter not found").
fn filter_id<'a>(params: Option<rpcwire::request::Params<'a>>) -> Result<&'a str, RpcError> {
    let mut p = EthParams::new(params);
    let id = p.required("filterId")?.value();
    p.finish()?;
    id.as_str()
        .ok_or_else(|| RpcError::invalid_params("filterId: a string"))
}

fn get_filter_changes(c: C<'_>) -> Answer {
    let changes = c.state.filter_changes(filter_id(c.params)?)?;
    raw(c.reply, &changes)
}

fn get_filter_logs(c: C<'_>) -> Answer {
    let logs = c.state.filter_logs(filter_id(c.params)?)?;
    raw(c.reply, &logs)
}

fn uninstall_filter(c: C<'_>) -> Answer {
    let id = filter_id(c.params)?;
    c.reply.bool(c.state.uninstall_filter(id))
}

/// `eth_sendTransaction` from one of anvil's dev accounts, signed here
/// with its key as anvil does (what web3.py's `w3.eth.send_transaction`
/// with `w3.eth.accounts[0]` and ethers' `getSigner()` send), then taken
/// as a raw transaction is: the same checks, the same errors. The type
/// follows the fields, as anvil's (and geth's up to 1.13; geth now makes
/// every `gasPrice` legacy and has no `type`): a `gasPrice` makes it
/// legacy (EIP-155), or EIP-2930 with an access list; otherwise EIP-1559.
/// A `type` given must agree with them. Defaults as geth's: the account's next nonce
/// (chosen under the chain's signing lock, so that two sends at once take
/// two), the estimate's gas, the suggested tip, a fee cap of twice the
/// base fee plus the tip, the suggested gas price. Any other sender is
/// "unknown account".
fn send_transaction(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let call = p.required("transaction")?.call_request()?;
    p.finish()?;
    let from = call.from()?.unwrap_or_default();
    let Some(key) = chain::dev_key(from) else {
        return Err(server_error("unknown account"));
    };
    let Some(to) = call.to()? else {
        return Err(no_evm());
    };
    let chain_id = c.state.chain_id();
    let Fees { price, tip, cap } = check_fee_fields(&call, chain_id)?;
    let list = access_list(&call)?;
    let authorizations = call.authorization_list().is_some();
    let blobs = call.blob_versioned_hashes()?.next().is_some();
    let kind = match call.tx_type()? {
        None if authorizations => 4,
        None if blobs => 3,
        None if price.is_none() => 2,
        None if list.is_some() => 1,
        None => 0,
        Some(kind) => kind,
    };
    let conflict = match kind {
        _ if authorizations && kind != 4 => Some("authorizationList"),
        _ if blobs && kind != 3 => Some("blobVersionedHashes"),
        0 if list.is_some() => Some("accessList"),
        0 | 1 if tip.is_some() || cap.is_some() => Some("EIP-1559 fees"),
        2 if price.is_some() => Some("gasPrice"),
        _ => None,
    };
    if let Some(field) = conflict {
        return Err(RpcError::invalid_params(format!(
            "transaction type {kind} does not take {field}"
        )));
    }
    let input = call.input_in(c.arena)?.unwrap_or_default();
    let gas = match call.gas()? {
        Some(gas) => gas,
        None => call_gas(&call, input)?,
    };
    let value = call.value()?.unwrap_or_default();
    let (to, input) = (TxKind::Call(to), Bytes::copy_from_slice(input));
    let price = price.unwrap_or(chain::BASE_FEE as u128 + PRIORITY_FEE);
    let _signing = c.state.signing();
    let nonce = match call.nonce()? {
        Some(nonce) => nonce,
        None => c.state.account(from, LATEST)?.1,
    };
    let signed: TxEnvelope = match kind {
        0 => sign(
            TxLegacy {
                chain_id: Some(chain_id),
                nonce,
                gas_price: price,
                gas_limit: gas,
                to,
                value,
                input,
            },
            key,
        )?,
        1 => sign(
            TxEip2930 {
                chain_id,
                nonce,
                gas_price: price,
                gas_limit: gas,
                to,
                value,
                access_list: list.unwrap_or_default(),
                input,
            },
            key,
        )?,
        2 => {
            let tip = tip.unwrap_or(PRIORITY_FEE);
            let cap = cap.unwrap_or_else(|| (2 * chain::BASE_FEE as u128).saturating_add(tip));
            sign(
                TxEip1559 {
                    chain_id,
                    nonce,
                    gas_limit: gas,
                    max_fee_per_gas: cap,
                    max_priority_fee_per_gas: tip,
                    to,
                    value,
                    access_list: list.unwrap_or_default(),
                    input,
                },
                key,
            )?
        }
        kind => {
            return Err(server_error(format!(
                "transaction type not supported by the built-in chain: {kind}"
            )));
        }
    };
    let hash = c.state.send_raw(&signed.encoded_2718())?;
    EthReply::hash(c.reply, &hash)
}

/// `tx` signed with `key` (a dev account's).
fn sign<T>(tx: T, key: B256) -> Result<TxEnvelope, RpcError>
where
    T: SignableTransaction<alloy_primitives::Signature>,
    alloy_consensus::Signed<T>: Into<TxEnvelope>,
{
    let signature = alloy_consensus::crypto::secp256k1::sign_message(key, tx.signature_hash())
        .map_err(|e| server_error(format!("signing failed: {e}")))?;
    Ok(tx.into_signed(signature).into())
}

fn send_raw_transaction(c: C<'_>) -> Answer {
    let mut p = EthParams::new(c.params);
    let bytes = p.required("transaction")?.bytes_in(c.arena)?;
    p.finish()?;
    let hash = c.state.send_raw(bytes)?;
    EthReply::hash(c.reply, &hash)
}

/// What an `eth_subscribe` asks for.
enum Subscription {
    NewHeads,
    NewPendingTransactions {
        full: bool,
    },
    /// Quiet: nothing emits logs.
    Logs,
    /// Quiet: the chain is never syncing (geth sends nothing until its
    /// sync status changes).
    Syncing,
}

/// `eth_subscribe`, over WebSocket or `--ipc`: `newHeads` (viem's
/// `watchBlocks` / `watchBlockNumber`, ethers' `on("block")`),
/// `newPendingTransactions` (each accepted transaction's hash, or with
/// geth's `true` the transaction: ethers' `on("pending")`), `logs`
/// (its filter checked; nothing emits logs, so it stays quiet) and
/// `syncing` (quiet too: the chain never syncs).
fn subscribe(c: C<'_>) -> Answer {
    let subs = Subscriptions::of(c.ctx)?;
    let mut p = EthParams::new(c.params);
    let kind = match p.required("subscriptionName")?.value().as_str() {
        Some("newHeads") => Subscription::NewHeads,
        Some("newPendingTransactions") => Subscription::NewPendingTransactions {
            full: full_tx(&mut p)?,
        },
        Some("logs") => {
            if let Some(filter) = p.optional("filter") {
                read_log_filter(&filter.log_filter()?)?;
            }
            Subscription::Logs
        }
        Some("syncing") => Subscription::Syncing,
        // geth's answer to a kind it does not have.
        Some(kind) => {
            return Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("no \"{kind}\" subscription in eth namespace"),
            ));
        }
        None => return Err(RpcError::invalid_params("subscriptionName: a string")),
    };
    p.finish()?;
    let (id, sink) = subs.subscribe()?;
    match kind {
        Subscription::NewHeads => {
            c.state.watch_heads(sink);
        }
        Subscription::NewPendingTransactions { full } => {
            c.state.watch_pending(sink, full);
        }
        Subscription::Logs | Subscription::Syncing => {
            c.state.watch_logs(sink);
        }
    }
    // Answered at once (a synchronous handler): the client has the id
    // before the first event.
    c.reply.str(&id.to_string())
}

fn unsubscribe(c: C<'_>) -> Answer {
    let subs = Subscriptions::of(c.ctx)?;
    let mut p = EthParams::new(c.params);
    // A string, as geth and the relaying gateway require (-32602 for any
    // other value; a number was answered `false`).
    let id = p.required("subscriptionId")?.str_in(c.arena)?;
    p.finish()?;
    // The chain drops the sink at its next block, or when it next prunes
    // its list of them.
    c.reply.bool(subs.unsubscribe(id))
}

/// anvil's dev accounts, whose transactions `eth_sendTransaction` signs.
fn accounts(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.json(&chain::dev_addresses())
}

fn syncing(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.bool(false)
}

fn listening(c: C<'_>) -> Answer {
    EthParams::new(c.params).finish()?;
    c.reply.bool(true)
}

/// Registers `name`, or its refusal when a `--deny` rule names it (as in
/// front of an upstream).
fn serve<F, R>(
    b: DispatcherBuilder<Arc<Chain>, SyncOnly>,
    deny: &[String],
    name: &'static str,
    handler: F,
) -> DispatcherBuilder<Arc<Chain>, SyncOnly>
where
    F: Fn(C<'_>) -> R + Send + Sync + 'static,
    R: rpcwire::dispatch::IntoResponse,
{
    match crate::config::deny_rule(deny, name) {
        Some(rule) => {
            let rule = rule.to_owned();
            b.method(name, move |c: C<'_>| {
                Err::<(), _>(crate::errors::denied(c.method(), &rule))
            })
        }
        None => b.method(name, handler),
    }
}

/// The built-in chain's dispatcher, reporting its calls to `observer`.
pub fn dispatcher(
    chain: Arc<Chain>,
    config: &Config,
    observer: Option<Arc<dyn Observer>>,
) -> Result<Dispatcher<Arc<Chain>, SyncOnly>, rpcwire::router::BuildError> {
    let mut b: DispatcherBuilder<Arc<Chain>, SyncOnly> = Dispatcher::builder(chain)
        .parser(config.parser())
        .max_response_len(config.max_response)
        .too_large_code(rpcwire::eth::codes::RESPONSE_TOO_LARGE);
    let deny = &config.deny[..];
    b = serve(b, deny, "eth_chainId", chain_id);
    b = serve(b, deny, "net_version", net_version);
    b = serve(b, deny, "net_listening", listening);
    b = serve(b, deny, "web3_clientVersion", client_version);
    b = serve(b, deny, "eth_blockNumber", block_number);
    b = serve(b, deny, "eth_getBalance", get_balance);
    b = serve(b, deny, "eth_getTransactionCount", get_transaction_count);
    b = serve(b, deny, "eth_gasPrice", gas_price);
    b = serve(b, deny, "eth_maxPriorityFeePerGas", max_priority_fee);
    b = serve(b, deny, "eth_feeHistory", fee_history);
    b = serve(b, deny, "eth_estimateGas", estimate_gas);
    b = serve(b, deny, "eth_call", call);
    b = serve(b, deny, "eth_createAccessList", create_access_list);
    b = serve(b, deny, "eth_getCode", get_code);
    b = serve(b, deny, "eth_getStorageAt", get_storage_at);
    b = serve(b, deny, "eth_getBlockByNumber", get_block_by_number);
    b = serve(b, deny, "eth_getBlockByHash", get_block_by_hash);
    b = serve(b, deny, "eth_getTransactionByHash", get_transaction_by_hash);
    b = serve(
        b,
        deny,
        "eth_getTransactionReceipt",
        get_transaction_receipt,
    );
    b = serve(b, deny, "eth_getLogs", get_logs);
    b = serve(b, deny, "eth_sendRawTransaction", send_raw_transaction);
    b = serve(b, deny, "eth_sendTransaction", send_transaction);
    b = serve(b, deny, "eth_newBlockFilter", new_block_filter);
    b = serve(
        b,
        deny,
        "eth_newPendingTransactionFilter",
        new_pending_transaction_filter,
    );
    b = serve(b, deny, "eth_newFilter", new_filter);
    b = serve(b, deny, "eth_getFilterChanges", get_filter_changes);
    b = serve(b, deny, "eth_getFilterLogs", get_filter_logs);
    b = serve(b, deny, "eth_uninstallFilter", uninstall_filter);
    b = serve(b, deny, "eth_subscribe", subscribe);
    b = serve(b, deny, "eth_unsubscribe", unsubscribe);
    b = serve(b, deny, "eth_accounts", accounts);
    b = serve(b, deny, "eth_syncing", syncing);
    if let Some(observer) = observer {
        b = b.observer(observer);
    }
    b.build()
}
