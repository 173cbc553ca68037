//! The standard methods: where each one's block parameter sits, whether
//! its result can be cached once its block is final, whether it writes,
//! subscribes or keeps state on the node, and whether it reads the chain's
//! state at its block ([`Method::reads_state`]: what only an archive node
//! keeps for old blocks); what a gateway needs to route and cache by block.
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
//! assert!(m.reads_state());
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
    /// or `blockHash` ([`LogFilter`](super::LogFilter); `trace_filter`'s
    /// filter has no `blockHash`).
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
    /// number at or below the finalized block; when it names a hash, as
    /// soon as the result is found (a hash names one block for good), but
    /// not with `"requireCanonical": true` (EIP-1898), whose answer a reorg
    /// turns into an error. For a filter, `toBlock` (or `blockHash`)
    /// decides. Tags (`latest`, `safe`, `pending`, `finalized`,
    /// `earliest`, which history expiry moves) and an absent block are not
    /// cacheable.
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
/// `name => block parameter, cache, access[, State];` (`State`: the
/// method reads state at its block, [`Method::reads_state`]), and
/// `READS_STATE`, that mark for each entry of [`METHODS`] in its order.
macro_rules! catalogue {
    ($($name:literal => $block:ident $(($pos:literal))?, $cache:ident, $access:ident $(, $state:ident)?;)*) => {
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

        /// [`Method::reads_state`] of each entry of [`METHODS`], in its
        /// order. A table beside [`METHODS`] rather than a field of
        /// [`Method`], whose fields are public: a new field would break
        /// code that builds or destructures one.
        const READS_STATE: &[bool] = &[$(state_mark!($($state)?),)*];
    };
}

/// The `State` mark of a [`catalogue!`] entry, as a `bool`.
macro_rules! state_mark {
    () => {
        false
    };
    (State) => {
        true
    };
}

catalogue! {
    "eth_accounts" => None, Never, Account;
    "eth_baseFee" => None, Never, Read;
    "eth_blobBaseFee" => None, Never, Read;
    "eth_blockNumber" => None, Never, Read;
    "eth_call" => Id(1), ByBlock, Read, State;
    "eth_callMany" => StateContext(1), ByBlock, Read, State;
    // What the node keeps (head, retention): changes with the head.
    "eth_capabilities" => None, Never, Read;
    "eth_chainId" => None, Static, Read;
    "eth_coinbase" => None, Never, Read;
    "eth_config" => None, Never, Read;
    // geth fills a call without fees or nonce from the node's price
    // oracle and pool (`setDefaults`): the same params at a final block
    // answer differently as those move.
    "eth_createAccessList" => Id(1), Never, Read, State;
    "eth_estimateGas" => Id(1), ByBlock, Read, State;
    // The window follows the head: geth drops the blocks older than its
    // history (1,024 by default), so a later answer is shorter.
    "eth_feeHistory" => Number(1), Never, Read;
    "eth_fillTransaction" => None, Never, Read;
    "eth_gasPrice" => None, Never, Read;
    "eth_getAccount" => Id(1), ByBlock, Read, State;
    "eth_getAccountInfo" => Id(1), ByBlock, Read, State;
    "eth_getBalance" => Id(1), ByBlock, Read, State;
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
    "eth_getCode" => Id(1), ByBlock, Read, State;
    "eth_getFilterChanges" => None, Never, Filter;
    "eth_getFilterLogs" => None, Never, Filter;
    "eth_getHeaderByHash" => Hash(0), ByBlock, Read;
    "eth_getHeaderByNumber" => Number(0), ByBlock, Read;
    "eth_getLogs" => Filter(0), ByBlock, Read;
    "eth_getMultiProof" => Id(1), ByBlock, Read, State;
    "eth_getProof" => Id(2), ByBlock, Read, State;
    "eth_getRawTransactionByBlockHashAndIndex" => Hash(0), ByBlock, Read;
    "eth_getRawTransactionByBlockNumberAndIndex" => Number(0), ByBlock, Read;
    "eth_getRawTransactionByHash" => None, ByTransaction, Read;
    "eth_getStorageAt" => Id(2), ByBlock, Read, State;
    "eth_getStorageValues" => Id(1), ByBlock, Read, State;
    "eth_getTransactionByBlockHashAndIndex" => Hash(0), ByBlock, Read;
    "eth_getTransactionByBlockNumberAndIndex" => Number(0), ByBlock, Read;
    "eth_getTransactionByHash" => None, ByTransaction, Read;
    // No block param, yet a state reader: reth finds the transaction by a
    // binary search over the blocks of the sender's nonce at each
    // (`eth_getTransactionCount` at block `mid`: rpc-eth-api
    // helpers/transaction.rs, `get_transaction_by_sender_and_nonce`), and
    // akula/erigon read the account's history (`AccountHistory`,
    // `AccountChangeSet`). A full node fails it for nonces whose blocks'
    // state it dropped; its block unknown, it cannot be routed by block,
    // only retried on an archive after such an error.
    "eth_getTransactionBySenderAndNonce" => None, ByTransaction, Read, State;
    "eth_getTransactionCount" => Id(1), ByBlock, Read, State;
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
    "eth_simulateV1" => Id(1), ByBlock, Read, State;
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

    "debug_accountRange" => Id(0), ByBlock, Read, State;
    "debug_dumpBlock" => Number(0), ByBlock, Read, State;
    // geth and reth take a block id (`rpc.BlockNumberOrHash`, `BlockId`).
    "debug_executionWitness" => Id(0), ByBlock, Read, State;
    "debug_executionWitnessByBlockHash" => Hash(0), ByBlock, Read, State;
    "debug_getBadBlocks" => None, Never, Read;
    "debug_getModifiedAccountsByHash" => Hash(0), ByBlock, Read, State;
    // geth: (startNum, endNum) as plain JSON numbers, a range whose end
    // decides what a cache may keep: no block parameter here.
    "debug_getModifiedAccountsByNumber" => None, Never, Read, State;
    "debug_getRawBlock" => Id(0), ByBlock, Read;
    "debug_getRawBlockAccessList" => Id(0), ByBlock, Read;
    "debug_getRawHeader" => Id(0), ByBlock, Read;
    "debug_getRawReceipts" => Id(0), ByBlock, Read;
    "debug_getRawTransaction" => None, ByTransaction, Read;
    "debug_getRawTransactions" => Id(0), ByBlock, Read;
    "debug_intermediateRoots" => Hash(0), ByBlock, Read, State;
    // geth takes a block id (`rpc.BlockNumberOrHash`), not only a hash.
    "debug_storageRangeAt" => Id(0), ByBlock, Read, State;
    // geth's `traceChain`, reth's chain tracing: a subscription.
    "debug_subscribe" => None, Never, Subscription;
    // geth keeps its last few rejected blocks only.
    "debug_traceBadBlock" => Hash(0), Never, Read, State;
    "debug_traceBlock" => None, Never, Read, State;
    "debug_traceBlockByHash" => Hash(0), ByBlock, Read, State;
    "debug_traceBlockByNumber" => Number(0), ByBlock, Read, State;
    "debug_traceCall" => Id(1), ByBlock, Read, State;
    "debug_traceCallMany" => StateContext(1), ByBlock, Read, State;
    "debug_traceTransaction" => None, ByTransaction, Read, State;
    "debug_unsubscribe" => None, Never, Subscription;

    "txpool_content" => None, Never, Read;
    "txpool_contentFrom" => None, Never, Read;
    "txpool_inspect" => None, Never, Read;
    "txpool_status" => None, Never, Read;

    "trace_block" => Id(0), ByBlock, Read, State;
    "trace_blockOpcodeGas" => Id(0), ByBlock, Read, State;
    "trace_call" => Id(2), ByBlock, Read, State;
    "trace_callMany" => Id(1), ByBlock, Read, State;
    "trace_filter" => Filter(0), ByBlock, Read, State;
    "trace_get" => None, ByTransaction, Read, State;
    // reth: (data, traceTypes, block id), run on the state at that block
    // as `trace_call` is.
    "trace_rawTransaction" => Id(2), ByBlock, Read, State;
    "trace_replayBlockTransactions" => Id(0), ByBlock, Read, State;
    "trace_replayTransaction" => None, ByTransaction, Read, State;
    "trace_transaction" => None, ByTransaction, Read, State;
    "trace_transactionOpcodeGas" => None, ByTransaction, Read, State;
}

/// The catalogue's entry for `name`, if it is a standard method: one
/// perfect-hash lookup (the table is built on first use).
pub fn lookup(name: &str) -> Option<&'static Method> {
    index(name).map(|i| &METHODS[i])
}

/// The position of `name` in [`METHODS`].
fn index(name: &str) -> Option<usize> {
    static ROUTER: OnceLock<Router<u16>> = OnceLock::new();
    let router = ROUTER.get_or_init(|| {
        Router::new(METHODS.iter().enumerate().map(|(i, m)| (m.name, i as u16)))
            .expect("the catalogue's names are distinct and valid")
    });
    router.get(name).map(|&i| i as usize)
}

impl Method {
    /// Whether the method reads the chain's *state* (accounts, code,
    /// storage) as of its block, or executes transactions on it: what a
    /// full node answers only for recent blocks (geth keeps the state of
    /// the last 128, reth's full node about 10,064; older ones fail with
    /// "missing trie node", "state at block #N is pruned" and the like)
    /// while an archive node answers for every block. A gateway sends such
    /// calls for old blocks to an archive node.
    ///
    /// `true` for the state readers (`eth_call`, `eth_getBalance`,
    /// `eth_getCode`, `eth_getStorageAt`, `eth_getTransactionCount`,
    /// `eth_getProof`, `eth_estimateGas`, `eth_createAccessList`, reth's
    /// `eth_getAccount`…) and for the methods that execute at a block:
    /// `eth_simulateV1`, `eth_callMany`, the `debug_trace*` and `trace_*`
    /// methods, including those that name a transaction or carry a block
    /// (`debug_traceTransaction`, `trace_replayTransaction`,
    /// `debug_traceBlock`), which run on the state before it, and
    /// `eth_getTransactionBySenderAndNonce`, which searches the sender's
    /// nonce through the blocks' state; their block's height is then
    /// unknown until asked. `false` for what nodes
    /// keep without state: blocks, transactions, receipts, logs, the fee
    /// history, the pool; and for a `Method` not in the catalogue.
    ///
    /// ```
    /// use rpcwire::eth::catalogue;
    ///
    /// assert!(catalogue::lookup("eth_getBalance").unwrap().reads_state());
    /// assert!(catalogue::lookup("debug_traceTransaction").unwrap().reads_state());
    /// assert!(!catalogue::lookup("eth_getBlockByNumber").unwrap().reads_state());
    /// ```
    pub fn reads_state(&self) -> bool {
        index(self.name).is_some_and(|i| READS_STATE[i] && METHODS[i] == *self)
    }
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
                assert!(!m.reads_state(), "{}", m.name);
            }
        }
        assert_eq!(READS_STATE.len(), METHODS.len());
    }

    /// The methods that read state at their block (or execute on it), and
    /// only those: a gateway sends them to an archive node for blocks a
    /// full node no longer keeps the state of.
    #[test]
    fn state_readers_are_exactly_these() {
        let expect = [
            "eth_call",
            "eth_callMany",
            "eth_createAccessList",
            "eth_estimateGas",
            "eth_getAccount",
            "eth_getAccountInfo",
            "eth_getBalance",
            "eth_getCode",
            "eth_getMultiProof",
            "eth_getProof",
            "eth_getStorageAt",
            "eth_getStorageValues",
            "eth_getTransactionBySenderAndNonce",
            "eth_getTransactionCount",
            "eth_simulateV1",
            // geth's state dumps and iterators, at a block.
            "debug_accountRange",
            "debug_dumpBlock",
            "debug_storageRangeAt",
            // geth opens the state tries of both blocks.
            "debug_getModifiedAccountsByHash",
            "debug_getModifiedAccountsByNumber",
            // Re-execute a block, or a call, on the state before it.
            "debug_executionWitness",
            "debug_executionWitnessByBlockHash",
            "debug_intermediateRoots",
            "debug_traceBadBlock",
            "debug_traceBlock",
            "debug_traceBlockByHash",
            "debug_traceBlockByNumber",
            "debug_traceCall",
            "debug_traceCallMany",
            "debug_traceTransaction",
            "trace_block",
            "trace_blockOpcodeGas",
            "trace_call",
            "trace_callMany",
            "trace_filter",
            "trace_get",
            "trace_rawTransaction",
            "trace_replayBlockTransactions",
            "trace_replayTransaction",
            "trace_transaction",
            "trace_transactionOpcodeGas",
        ];
        let mut found: Vec<&str> = METHODS
            .iter()
            .filter(|m| m.reads_state())
            .map(|m| m.name)
            .collect();
        let mut expect = expect.to_vec();
        found.sort_unstable();
        expect.sort_unstable();
        assert_eq!(found, expect);
        // What nodes keep without state: blocks, receipts, logs, fees.
        for name in [
            "eth_getBlockByNumber",
            "eth_getBlockByHash",
            "eth_getBlockReceipts",
            "eth_getLogs",
            "eth_getTransactionByHash",
            "eth_getTransactionReceipt",
            "eth_feeHistory",
            "eth_blockNumber",
            "debug_getRawBlock",
        ] {
            assert!(!lookup(name).unwrap().reads_state(), "{name}");
        }
        // Only the catalogue's own entries: the same name with other
        // fields is not one of them.
        let mut other = *lookup("eth_call").unwrap();
        other.block = BlockParam::None;
        assert!(!other.reads_state());
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
