//! The standard methods: where each one's block parameter sits, whether
//! its result can be cached once its block is final, and whether it writes,
//! subscribes or keeps state on the node; what a gateway needs to route and
//! cache by block.
//!
//! One list (below) generates the table [`METHODS`]; [`lookup`] finds an
//! entry through the crate's perfect-hash [`Router`].
//!
//! The list covers the execution API (`eth_`, as geth and reth serve it,
//! including reth's `eth_callMany`, `eth_getAccount`…), `net_`, `web3_`,
//! and the common `debug_`, `txpool_` and `trace_` methods.
//!
//! ```
//! use rpcwire::eth::catalogue::{self, Access, BlockParam, Cache};
//!
//! let m = catalogue::lookup("eth_getBalance").unwrap();
//! assert_eq!(m.block, BlockParam::Id(1));
//! assert_eq!(m.cache, Cache::ByBlock);
//! assert_eq!(catalogue::lookup("eth_sendRawTransaction").unwrap().access, Access::Write);
//! assert_eq!(catalogue::lookup("eth_getLogs").unwrap().block, BlockParam::Filter(0));
//! assert!(catalogue::lookup("eth_getbalance").is_none());
//! ```

use std::sync::OnceLock;

use crate::router::Router;

/// The method's namespace, from its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Namespace {
    /// `eth_`
    Eth,
    /// `net_`
    Net,
    /// `web3_`
    Web3,
    /// `debug_`
    Debug,
    /// `txpool_`
    Txpool,
    /// `trace_`
    Trace,
}

impl Namespace {
    /// The namespace a method name starts with.
    pub const fn of(name: &str) -> Option<Namespace> {
        let b = name.as_bytes();
        let prefixes: [(&[u8], Namespace); 6] = [
            (b"eth_", Namespace::Eth),
            (b"net_", Namespace::Net),
            (b"web3_", Namespace::Web3),
            (b"debug_", Namespace::Debug),
            (b"txpool_", Namespace::Txpool),
            (b"trace_", Namespace::Trace),
        ];
        let mut i = 0;
        while i < prefixes.len() {
            let (p, ns) = prefixes[i];
            if b.len() > p.len() {
                let mut j = 0;
                while j < p.len() && b[j] == p[j] {
                    j += 1;
                }
                if j == p.len() {
                    return Some(ns);
                }
            }
            i += 1;
        }
        None
    }
}

/// Where a method's block parameter sits (positions from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockParam {
    /// No block parameter.
    None,
    /// A block id at this position (tag, number, hash or EIP-1898 object;
    /// read it with [`EthValue::block_id`](super::EthValue::block_id));
    /// when absent, `latest`.
    Id(u8),
    /// A block number or tag at this position
    /// ([`EthValue::block_number`](super::EthValue::block_number)).
    Number(u8),
    /// A block hash at this position.
    Hash(u8),
    /// Inside the filter object at this position: `fromBlock` / `toBlock`,
    /// or `blockHash` ([`LogFilter`](super::LogFilter)).
    Filter(u8),
    /// Inside the state-context object at this position (reth's
    /// `eth_callMany`, `debug_traceCallMany`): its `blockNumber` member, a
    /// block id.
    StateContext(u8),
}

impl BlockParam {
    /// The position of the param that holds the block, if any.
    pub const fn position(self) -> Option<usize> {
        match self {
            BlockParam::None => None,
            BlockParam::Id(p)
            | BlockParam::Number(p)
            | BlockParam::Hash(p)
            | BlockParam::Filter(p)
            | BlockParam::StateContext(p) => Some(p as usize),
        }
    }
}

/// Whether a method's result can be cached, and keyed by what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cache {
    /// Never: it follows the head, the mempool, the node's own state, or
    /// changes something.
    Never,
    /// Immutable once its block is final: when the block parameter names a
    /// number at or below the finalized block (or `earliest`); when it
    /// names a hash, as soon as the result is found (a hash names one block
    /// for good). For a filter, `toBlock` (or `blockHash`) decides. Tags
    /// that move (`latest`, `safe`, `pending`, absent) are not cacheable.
    ByBlock,
    /// Keyed by a transaction hash: immutable once the result is not
    /// `null` and the block it names (`blockNumber` in the result) is
    /// final.
    ByTransaction,
    /// The same for every call with the same params, whatever the chain's
    /// state: constants of the chain (`eth_chainId`, `net_version`) and
    /// pure functions (`web3_sha3`).
    Static,
}

/// What a method does besides reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reads chain or node state.
    Read,
    /// Changes state: submits a transaction or work to the network.
    Write,
    /// Opens or closes a subscription (needs a connection that stays open).
    Subscription,
    /// Creates, polls or removes a filter held by one node: every call for
    /// one filter id must go to the node that made it.
    Filter,
    /// Uses keys held by the node (`eth_sign`, `eth_accounts`…).
    Account,
}

/// One standard method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Method {
    /// The method name.
    pub name: &'static str,
    /// Its namespace.
    pub namespace: Namespace,
    /// Where its block parameter sits.
    pub block: BlockParam,
    /// Whether its result can be cached.
    pub cache: Cache,
    /// Whether it writes, subscribes, or keeps state on the node.
    pub access: Access,
}

/// Generates [`METHODS`] from one list:
/// `name => block parameter, cache, access;`.
macro_rules! catalogue {
    ($($name:literal => $block:ident $(($pos:literal))?, $cache:ident, $access:ident;)*) => {
        /// Every method of the catalogue, sorted by name within each
        /// namespace.
        pub const METHODS: &[Method] = &[$(
            Method {
                name: $name,
                namespace: match Namespace::of($name) {
                    Some(ns) => ns,
                    None => panic!("a method of the catalogue has no known namespace"),
                },
                block: BlockParam::$block $(($pos))?,
                cache: Cache::$cache,
                access: Access::$access,
            },
        )*];
    };
}

catalogue! {
    "eth_accounts" => None, Never, Account;
    "eth_baseFee" => None, Never, Read;
    "eth_blobBaseFee" => None, Never, Read;
    "eth_blockNumber" => None, Never, Read;
    "eth_call" => Id(1), ByBlock, Read;
    "eth_callMany" => StateContext(1), ByBlock, Read;
    // What the node keeps (head, retention): changes with the head.
    "eth_capabilities" => None, Never, Read;
    "eth_chainId" => None, Static, Read;
    "eth_coinbase" => None, Never, Read;
    "eth_config" => None, Never, Read;
    "eth_createAccessList" => Id(1), ByBlock, Read;
    "eth_estimateGas" => Id(1), ByBlock, Read;
    "eth_feeHistory" => Number(1), ByBlock, Read;
    "eth_fillTransaction" => None, Never, Read;
    "eth_gasPrice" => None, Never, Read;
    "eth_getAccount" => Id(1), ByBlock, Read;
    "eth_getAccountInfo" => Id(1), ByBlock, Read;
    "eth_getBalance" => Id(1), ByBlock, Read;
    // EIP-7928 block access lists (reth; the spec's `eth_getBlockAccessList`).
    "eth_getBlockAccessList" => Id(0), ByBlock, Read;
    "eth_getBlockAccessListByBlockHash" => Hash(0), ByBlock, Read;
    "eth_getBlockAccessListByBlockNumber" => Number(0), ByBlock, Read;
    "eth_getBlockAccessListRaw" => Id(0), ByBlock, Read;
    "eth_getBlockByHash" => Hash(0), ByBlock, Read;
    "eth_getBlockByNumber" => Number(0), ByBlock, Read;
    "eth_getBlockReceipts" => Id(0), ByBlock, Read;
    "eth_getBlockTransactionCountByHash" => Hash(0), ByBlock, Read;
    "eth_getBlockTransactionCountByNumber" => Number(0), ByBlock, Read;
    "eth_getCode" => Id(1), ByBlock, Read;
    "eth_getFilterChanges" => None, Never, Filter;
    "eth_getFilterLogs" => None, Never, Filter;
    "eth_getHeaderByHash" => Hash(0), ByBlock, Read;
    "eth_getHeaderByNumber" => Number(0), ByBlock, Read;
    "eth_getLogs" => Filter(0), ByBlock, Read;
    "eth_getMultiProof" => Id(1), ByBlock, Read;
    "eth_getProof" => Id(2), ByBlock, Read;
    "eth_getRawTransactionByBlockHashAndIndex" => Hash(0), ByBlock, Read;
    "eth_getRawTransactionByBlockNumberAndIndex" => Number(0), ByBlock, Read;
    "eth_getRawTransactionByHash" => None, ByTransaction, Read;
    "eth_getStorageAt" => Id(2), ByBlock, Read;
    "eth_getStorageValues" => Id(1), ByBlock, Read;
    "eth_getTransactionByBlockHashAndIndex" => Hash(0), ByBlock, Read;
    "eth_getTransactionByBlockNumberAndIndex" => Number(0), ByBlock, Read;
    "eth_getTransactionByHash" => None, ByTransaction, Read;
    "eth_getTransactionBySenderAndNonce" => None, ByTransaction, Read;
    "eth_getTransactionCount" => Id(1), ByBlock, Read;
    "eth_getTransactionReceipt" => None, ByTransaction, Read;
    "eth_getUncleByBlockHashAndIndex" => Hash(0), ByBlock, Read;
    "eth_getUncleByBlockNumberAndIndex" => Number(0), ByBlock, Read;
    "eth_getUncleCountByBlockHash" => Hash(0), ByBlock, Read;
    "eth_getUncleCountByBlockNumber" => Number(0), ByBlock, Read;
    "eth_getWork" => None, Never, Read;
    "eth_hashrate" => None, Never, Read;
    "eth_maxPriorityFeePerGas" => None, Never, Read;
    "eth_mining" => None, Never, Read;
    "eth_newBlockFilter" => None, Never, Filter;
    "eth_newFilter" => Filter(0), Never, Filter;
    "eth_newPendingTransactionFilter" => None, Never, Filter;
    "eth_pendingTransactions" => None, Never, Account;
    "eth_protocolVersion" => None, Never, Read;
    "eth_sendRawTransaction" => None, Never, Write;
    "eth_sendRawTransactionSync" => None, Never, Write;
    "eth_sendTransaction" => None, Never, Write;
    "eth_sign" => None, Never, Account;
    "eth_signTransaction" => None, Never, Account;
    "eth_signTypedData" => None, Never, Account;
    "eth_signTypedData_v4" => None, Never, Account;
    "eth_simulateV1" => Id(1), ByBlock, Read;
    "eth_submitHashrate" => None, Never, Write;
    "eth_submitWork" => None, Never, Write;
    "eth_subscribe" => None, Never, Subscription;
    "eth_syncing" => None, Never, Read;
    "eth_uninstallFilter" => None, Never, Filter;
    "eth_unsubscribe" => None, Never, Subscription;

    "net_listening" => None, Never, Read;
    "net_peerCount" => None, Never, Read;
    "net_version" => None, Static, Read;

    "web3_clientVersion" => None, Never, Read;
    "web3_sha3" => None, Static, Read;

    "debug_accountRange" => Id(0), ByBlock, Read;
    "debug_dumpBlock" => Number(0), ByBlock, Read;
    // geth and reth take a block id (`rpc.BlockNumberOrHash`, `BlockId`).
    "debug_executionWitness" => Id(0), ByBlock, Read;
    "debug_executionWitnessByBlockHash" => Hash(0), ByBlock, Read;
    "debug_getBadBlocks" => None, Never, Read;
    "debug_getModifiedAccountsByHash" => Hash(0), ByBlock, Read;
    // geth: (startNum, endNum) as plain JSON numbers, a range whose end
    // decides what a cache may keep: no block parameter here.
    "debug_getModifiedAccountsByNumber" => None, Never, Read;
    "debug_getRawBlock" => Id(0), ByBlock, Read;
    "debug_getRawBlockAccessList" => Id(0), ByBlock, Read;
    "debug_getRawHeader" => Id(0), ByBlock, Read;
    "debug_getRawReceipts" => Id(0), ByBlock, Read;
    "debug_getRawTransaction" => None, ByTransaction, Read;
    "debug_getRawTransactions" => Id(0), ByBlock, Read;
    "debug_intermediateRoots" => Hash(0), ByBlock, Read;
    // geth takes a block id (`rpc.BlockNumberOrHash`), not only a hash.
    "debug_storageRangeAt" => Id(0), ByBlock, Read;
    // geth's `traceChain`, reth's chain tracing: a subscription.
    "debug_subscribe" => None, Never, Subscription;
    "debug_traceBadBlock" => Hash(0), ByBlock, Read;
    "debug_traceBlock" => None, Never, Read;
    "debug_traceBlockByHash" => Hash(0), ByBlock, Read;
    "debug_traceBlockByNumber" => Number(0), ByBlock, Read;
    "debug_traceCall" => Id(1), ByBlock, Read;
    "debug_traceCallMany" => StateContext(1), ByBlock, Read;
    "debug_traceTransaction" => None, ByTransaction, Read;
    "debug_unsubscribe" => None, Never, Subscription;

    "txpool_content" => None, Never, Read;
    "txpool_contentFrom" => None, Never, Read;
    "txpool_inspect" => None, Never, Read;
    "txpool_status" => None, Never, Read;

    "trace_block" => Id(0), ByBlock, Read;
    "trace_blockOpcodeGas" => Id(0), ByBlock, Read;
    "trace_call" => Id(2), ByBlock, Read;
    "trace_callMany" => Id(1), ByBlock, Read;
    "trace_filter" => Filter(0), ByBlock, Read;
    "trace_get" => None, ByTransaction, Read;
    // reth: (data, traceTypes, block id), run on the state at that block
    // as `trace_call` is.
    "trace_rawTransaction" => Id(2), ByBlock, Read;
    "trace_replayBlockTransactions" => Id(0), ByBlock, Read;
    "trace_replayTransaction" => None, ByTransaction, Read;
    "trace_transaction" => None, ByTransaction, Read;
    "trace_transactionOpcodeGas" => None, ByTransaction, Read;
}

/// The catalogue's entry for `name`, if it is a standard method: one
/// perfect-hash lookup (the table is built on first use).
pub fn lookup(name: &str) -> Option<&'static Method> {
    static ROUTER: OnceLock<Router<u16>> = OnceLock::new();
    let router = ROUTER.get_or_init(|| {
        Router::new(METHODS.iter().enumerate().map(|(i, m)| (m.name, i as u16)))
            .expect("the catalogue's names are distinct and valid")
    });
    router.get(name).map(|&i| &METHODS[i as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_round_trips() {
        for m in METHODS {
            assert_eq!(lookup(m.name), Some(m), "{}", m.name);
            assert_eq!(Some(m.namespace), Namespace::of(m.name));
        }
        for bad in [
            "",
            "eth_",
            "eth_getbalance",
            "eth_getBalance ",
            "rpc.discover",
        ] {
            assert_eq!(lookup(bad), None, "{bad}");
        }
    }

    #[test]
    fn sorted_within_namespaces_and_consistent() {
        for w in METHODS.windows(2) {
            if w[0].namespace == w[1].namespace {
                assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
            }
        }
        for m in METHODS {
            // A result keyed by block needs a block to key it by.
            if m.cache == Cache::ByBlock {
                assert_ne!(m.block, BlockParam::None, "{}", m.name);
            }
            if m.access != Access::Read {
                assert_ne!(m.cache, Cache::ByBlock, "{}", m.name);
            }
        }
    }

    /// `(block, cache, access)` of a catalogued method.
    fn entry(name: &str) -> (BlockParam, Cache, Access) {
        let m = lookup(name).unwrap_or_else(|| panic!("{name} missing"));
        (m.block, m.cache, m.access)
    }

    /// geth, eth/api_debug.go, `DebugAPI.ExecutionWitness(bn
    /// rpc.BlockNumberOrHash)`; reth, crates/rpc/rpc-api/src/debug.rs,
    /// `debug_execution_witness(block: BlockId, ..)`: a block id, hashes too
    /// (the entry named a block number, which refuses a hash).
    #[test]
    fn execution_witness_takes_a_block_id() {
        assert_eq!(
            entry("debug_executionWitness"),
            (BlockParam::Id(0), Cache::ByBlock, Access::Read)
        );
    }

    /// geth, eth/api_debug.go, `DebugAPI.StorageRangeAt(ctx, blockNrOrHash
    /// rpc.BlockNumberOrHash, txIndex, ..)`: a block id, numbers and tags
    /// too, not only a hash (reth's `debug_storage_range_at` takes a hash
    /// but is a stub answering `null`).
    #[test]
    fn storage_range_at_takes_a_block_id() {
        assert_eq!(
            entry("debug_storageRangeAt"),
            (BlockParam::Id(0), Cache::ByBlock, Access::Read)
        );
    }

    /// reth, crates/rpc/rpc-api/src/trace.rs, `trace_raw_transaction(data,
    /// trace_types, block_id: Option<BlockId>)`, run on the state at that
    /// block (crates/rpc/rpc/src/trace.rs: `block_id.unwrap_or_default()`,
    /// latest): fixed once the block is final, as `trace_call`; the entry
    /// named no block, so a gateway could neither route it by block nor
    /// cache it.
    #[test]
    fn trace_raw_transaction_takes_a_block_id_third() {
        assert_eq!(
            entry("trace_rawTransaction"),
            (BlockParam::Id(2), Cache::ByBlock, Access::Read)
        );
    }

    /// Methods geth or reth serve (and the execution-apis spec, where it
    /// names them) that the catalogue once lacked.
    #[test]
    fn methods_the_clients_serve() {
        let expect = [
            // geth internal/ethapi/api.go `EthereumAPI.BaseFee()`; reth
            // crates/rpc/rpc-eth-api/src/core.rs `base_fee`: the next block's
            // base fee, follows the head.
            ("eth_baseFee", BlockParam::None, Cache::Never, Access::Read),
            // geth internal/ethapi/api.go `TransactionAPI.PendingTransactions()`:
            // the pool's transactions sent from the node's own accounts.
            (
                "eth_pendingTransactions",
                BlockParam::None,
                Cache::Never,
                Access::Account,
            ),
            // EIP-712 signing as wallets call it (MetaMask, anvil's
            // `eth_signTypedData_v4`); it uses the node's keys.
            (
                "eth_signTypedData_v4",
                BlockParam::None,
                Cache::Never,
                Access::Account,
            ),
            // geth internal/ethapi/capabilities.go `BlockChainAPI.Capabilities()`;
            // reth `capabilities`: the node's head and retention.
            (
                "eth_capabilities",
                BlockParam::None,
                Cache::Never,
                Access::Read,
            ),
            // geth `BlockChainAPI.GetStorageValues(ctx, requests,
            // blockNrOrHash *rpc.BlockNumberOrHash)`; reth `storage_values(
            // requests, block_number: Option<BlockId>)`.
            (
                "eth_getStorageValues",
                BlockParam::Id(1),
                Cache::ByBlock,
                Access::Read,
            ),
            // reth `get_multi_proof(targets, block_number: Option<BlockId>)`.
            (
                "eth_getMultiProof",
                BlockParam::Id(1),
                Cache::ByBlock,
                Access::Read,
            ),
            // reth `block_access_list(block_id: BlockId)` (EIP-7928; the
            // spec's src/eth/block.yaml), and its by-hash, by-number and
            // raw forms.
            (
                "eth_getBlockAccessList",
                BlockParam::Id(0),
                Cache::ByBlock,
                Access::Read,
            ),
            (
                "eth_getBlockAccessListByBlockHash",
                BlockParam::Hash(0),
                Cache::ByBlock,
                Access::Read,
            ),
            (
                "eth_getBlockAccessListByBlockNumber",
                BlockParam::Number(0),
                Cache::ByBlock,
                Access::Read,
            ),
            (
                "eth_getBlockAccessListRaw",
                BlockParam::Id(0),
                Cache::ByBlock,
                Access::Read,
            ),
            // reth crates/rpc/rpc-api/src/debug.rs `raw_block_access_list(
            // block_id: BlockId)`, `raw_transactions(block_id: BlockId)`,
            // `debug_execution_witness_by_block_hash(hash: B256, ..)`.
            (
                "debug_getRawBlockAccessList",
                BlockParam::Id(0),
                Cache::ByBlock,
                Access::Read,
            ),
            (
                "debug_getRawTransactions",
                BlockParam::Id(0),
                Cache::ByBlock,
                Access::Read,
            ),
            (
                "debug_executionWitnessByBlockHash",
                BlockParam::Hash(0),
                Cache::ByBlock,
                Access::Read,
            ),
            // geth eth/tracers/api.go `API.TraceChain` (a `debug_subscribe`
            // subscription); reth `debug_subscribe`.
            (
                "debug_subscribe",
                BlockParam::None,
                Cache::Never,
                Access::Subscription,
            ),
            (
                "debug_unsubscribe",
                BlockParam::None,
                Cache::Never,
                Access::Subscription,
            ),
        ];
        for (name, block, cache, access) in expect {
            assert_eq!(entry(name), (block, cache, access), "{name}");
        }
    }
}
