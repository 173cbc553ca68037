//! The built-in chain: what the gateway serves when it has no upstream.
//!
//! An in-memory chain for trying clients out: anvil's first ten dev
//! accounts hold 10,000 ETH each, every accepted transaction is mined at
//! once in a block of its own (and `--block-time` adds empty blocks on a
//! timer). It executes value transfers only: signed legacy, EIP-2930 and
//! EIP-1559 transactions, decoded and their sender recovered with alloy's
//! consensus types, checked as geth checks them (chain id, nonce, fees,
//! balance, intrinsic gas and Prague's calldata floor), with geth's error
//! messages. There is no EVM: a contract creation or a transaction to a
//! precompile is refused, `eth_call` answers `0x` (every account is an
//! externally owned one), and nothing emits logs. Over WebSocket (or
//! IPC), `eth_subscribe("newHeads")` sends each block's header as it is
//! mined and `newPendingTransactions` each accepted transaction's hash (or
//! the transaction); `logs` is accepted and, as nothing emits logs, quiet.
//! Clients polling over HTTP get geth's filters (`eth_newBlockFilter`,
//! `eth_newPendingTransactionFilter`, `eth_newFilter`,
//! `eth_getFilterChanges`, `eth_getFilterLogs`, `eth_uninstallFilter`):
//! each keeps a cursor (the last block it reported), not a backlog, so
//! a filter costs the same however long it goes unpolled, and one unpolled
//! for five minutes is removed, as geth does. At most [`MAX_FILTERS`] are
//! installed, [`MAX_FILTERS_PER_CLIENT`] by one client address.
//!
//! `safe` and `finalized` are 32 and 64 blocks behind the head, as on
//! anvil; `pending` is the head.
//!
//! Block hashes are real header hashes (keccak of the RLP header) with real
//! transaction and receipt roots; the state root is not a trie root (a
//! digest of the block's transactions), which no client checks.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{
    EMPTY_OMMER_ROOT_HASH, Eip658Value, Header, Receipt, ReceiptEnvelope, ReceiptWithBloom,
    Transaction, TxEnvelope,
};
use alloy_eips::eip2718::Decodable2718;
use rpcwire::RpcError;
use rpcwire::dispatch::{Done, Reply};
use rpcwire::eth::codes::server_error;
use rpcwire::eth::{Address, B256, BlockId, BlockNumberOrTag, BlockTag, U256};
use rpcwire::server::subscriptions::{Sink, SubscriptionId};

/// anvil's first ten dev accounts (from its default mnemonic), with their
/// private keys, so that `cast send --private-key` works against both.
pub const DEV_ACCOUNTS: [(&str, &str); 10] = [
    (
        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
        "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    ),
    (
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    ),
    (
        "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    ),
    (
        "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
        "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    ),
    (
        "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
        "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    ),
    (
        "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
        "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    ),
    (
        "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
        "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    ),
    (
        "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
        "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    ),
    (
        "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
        "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    ),
    (
        "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
        "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
    ),
];

/// How far `safe` lags the head, in blocks (anvil's epoch); `finalized`
/// lags twice as far.
pub const SAFE_DEPTH: u64 = 32;

/// The block `tag` names at `head`: as anvil, `safe` one epoch (32
/// blocks) behind the head and `finalized` two; `pending` the head.
pub fn tag_number(tag: BlockTag, head: u64) -> u64 {
    match tag {
        BlockTag::Earliest => 0,
        BlockTag::Safe => head.saturating_sub(SAFE_DEPTH),
        BlockTag::Finalized => head.saturating_sub(2 * SAFE_DEPTH),
        BlockTag::Latest | BlockTag::Pending => head,
    }
}

/// The key of the dev account `address`, if it is one.
pub fn dev_key(address: Address) -> Option<B256> {
    DEV_ACCOUNTS
        .iter()
        .find(|(a, _)| a.parse::<Address>().ok() == Some(address))
        .and_then(|(_, key)| key.parse().ok())
}

/// The dev accounts' addresses, as `eth_accounts` lists them.
pub fn dev_addresses() -> Vec<Address> {
    DEV_ACCOUNTS
        .iter()
        .filter_map(|(a, _)| a.parse().ok())
        .collect()
}

/// Each dev account's starting balance: 10,000 ETH, as anvil.
pub const DEV_BALANCE_WEI: u128 = 10_000 * 1_000_000_000_000_000_000;
/// The base fee of every block (1 gwei, anvil's first base fee); kept
/// constant.
pub const BASE_FEE: u64 = 1_000_000_000;
/// The tip `eth_maxPriorityFeePerGas` suggests.
pub const PRIORITY_FEE: u128 = 1_000_000_000;
/// Every block's gas limit (anvil's default).
pub const GAS_LIMIT: u64 = 30_000_000;
/// The gas of a plain value transfer.
pub const TRANSFER_GAS: u64 = 21_000;
/// The most gas one transaction may carry (EIP-7825, Osaka's rules,
/// which the chain follows: geth refuses more with "transaction gas limit
/// too high", and its estimates stop there).
pub const MAX_TX_GAS: u64 = 1 << 24;
/// The largest signed transaction taken (geth's transaction pool limit,
/// four slots of 32 KiB): every transaction is kept for the chain's life,
/// and one of 2.6 MB of calldata was taken whole.
pub const MAX_TX_SIZE: usize = 4 * 32 * 1024;

/// One account's history: (block, balance, nonce) after each change.
#[derive(Default)]
struct Account {
    history: Vec<(u64, U256, u64)>,
}

impl Account {
    fn at(&self, block: u64) -> (U256, u64) {
        let i = self.history.partition_point(|&(b, _, _)| b <= block);
        if i == 0 {
            (U256::ZERO, 0)
        } else {
            let (_, bal, nonce) = self.history[i - 1];
            (bal, nonce)
        }
    }

    fn set(&mut self, block: u64, balance: U256, nonce: u64) {
        match self.history.last_mut() {
            Some(last) if last.0 == block => *last = (block, balance, nonce),
            _ => self.history.push((block, balance, nonce)),
        }
    }
}

struct Block {
    header: Header,
    hash: B256,
    size: usize,
    txs: Vec<B256>,
}

/// The subscriptions to one kind of event. Each is dropped the first time
/// a send finds it closed (unsubscribed, or its client left), or when the
/// list has doubled since it was last pruned ([`Watchers::add`]).
#[derive(Default)]
struct Watchers {
    sinks: Vec<Sink>,
    /// `sinks.len()` when closed subscriptions were last taken out.
    pruned: usize,
}

impl Watchers {
    /// Adds `sink`; returns how many the list holds now.
    fn add(&mut self, sink: Sink) -> usize {
        // Closed ones are also dropped here once the list has doubled since
        // it was last pruned (a constant cost per subscription, amortized):
        // between events (none without `--block-time` or a transaction) a
        // client subscribing and unsubscribing in a loop grew it, each
        // holding its connection's registry, without bound.
        if self.sinks.len() >= (2 * self.pruned).max(64) {
            self.sinks.retain(|sink| !sink.is_closed());
            self.pruned = self.sinks.len();
        }
        self.sinks.push(sink);
        self.sinks.len()
    }

    /// Sends `result` (JSON text, made only when someone listens) to every
    /// open subscription. Called under the chain's lock, so that events go
    /// out in order; a send only queues, it never waits for the client.
    fn send(&mut self, result: impl FnOnce() -> String) {
        if self.sinks.is_empty() {
            return;
        }
        let result = result();
        self.sinks
            .retain(|sink| sink.send_raw(result.as_bytes()).is_ok());
        self.pruned = self.sinks.len();
    }
}

/// What a filter reports on `eth_getFilterChanges`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterKind {
    /// `eth_newBlockFilter`: the hashes of the blocks mined since.
    Blocks,
    /// `eth_newPendingTransactionFilter`: the transactions accepted since
    /// (each is mined at once, so those of the blocks mined since): their
    /// hashes, or with `full` the transactions.
    PendingTransactions { full: bool },
    /// `eth_newFilter`: the matching logs since; none (nothing emits logs).
    Logs,
}

/// How long a filter lives unpolled (geth's default).
pub const FILTER_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The most filters installed at once (geth has no bound; each costs a
/// few dozen bytes here, and the bound keeps a client creating them in a
/// loop from growing the chain's memory for the five minutes they live).
pub const MAX_FILTERS: usize = 10_000;

/// The most filters one client (one IP address; the IPC socket's clients
/// count as one) has installed at once: a client creating them in a loop
/// fills its own share, not the room every client shares. A client, not
/// a connection: filters are polled over HTTP, where a client may use a
/// new connection for every request, and outlive connections.
pub const MAX_FILTERS_PER_CLIENT: usize = MAX_FILTERS / 4;

/// The most items (block hashes, transactions) one `eth_getFilterChanges`
/// answers: the rest come with the next poll (the cursor stops at the last
/// block whole in the answer). A filter of full transactions left unpolled
/// rendered every transaction since under the chain's one lock (up to the
/// whole `--chain-tx-bytes` budget, twice over as hex).
pub const MAX_FILTER_CHANGES: usize = 1_000;

/// The bytes of JSON past which one `eth_getFilterChanges` stops adding
/// blocks (full transactions of up to 128 KiB each reach it long before
/// [`MAX_FILTER_CHANGES`]); a block is always answered whole, and at least
/// one.
pub const MAX_FILTER_CHANGES_BYTES: usize = 1 << 20;

/// How often at most a full filter table is swept for expired filters.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

struct Filter {
    /// Its id's value (the key it is kept under).
    key: u128,
    /// The client that installed it (`None`: over IPC).
    owner: Option<IpAddr>,
    kind: FilterKind,
    /// The last block it reported (the head when it was made): its changes
    /// are the blocks after it. A poll capped by [`MAX_FILTER_CHANGES`]
    /// leaves it below the head.
    seen: u64,
    /// When it was made or last polled for changes.
    polled: Instant,
}

/// geth's answer to an id naming no filter (unknown, uninstalled, expired,
/// or of the wrong kind for `eth_getFilterLogs`).
fn filter_not_found() -> RpcError {
    server_error("filter not found")
}

struct Mined {
    tx: TxEnvelope,
    from: Address,
    block: u64,
    index: u64,
    gas_used: u64,
    cumulative_gas_used: u64,
    effective_gas_price: u128,
}

struct State {
    accounts: HashMap<Address, Account>,
    blocks: Vec<Block>,
    by_hash: HashMap<B256, u64>,
    txs: HashMap<B256, Mined>,
    /// The `newHeads` subscriptions.
    heads: Watchers,
    /// The `newPendingTransactions` subscriptions: hashes, and (`true`)
    /// whole transactions.
    pending_hashes: Watchers,
    pending_full: Watchers,
    /// The `logs` subscriptions: none is ever sent anything (nothing emits
    /// logs), but each lives while its sink does.
    logs: Watchers,
    /// The installed filters, by id.
    filters: HashMap<u128, Filter>,
    /// How many of `filters` each client installed (no entry: none).
    filters_by_owner: HashMap<Option<IpAddr>, usize>,
    /// When the expired filters were last swept out.
    swept: Option<Instant>,
    /// What the transactions in `txs` cost: their signed bytes and
    /// [`KEPT_PER_TRANSACTION`] each.
    tx_bytes: usize,
}

/// What the chain keeps for a transaction beside its signed bytes: its
/// decoded envelope, its block (an alloy header and its hashes), its
/// entries in the maps and the accounts' histories (2.1 to 2.6 KB for a
/// transfer, measured with a counting allocator: tests/gateway's
/// `the_chain_s_memory_stays_near_its_transaction_budget`).
pub const KEPT_PER_TRANSACTION: usize = 2560;

/// The chain; every method takes its lock once, briefly.
pub struct Chain {
    chain_id: u64,
    /// The most `State::tx_bytes` may reach: every transaction is kept for
    /// the chain's life, so clients (the dev keys are public) could grow
    /// its memory without end.
    tx_budget: usize,
    state: Mutex<State>,
    /// How long a filter lives unpolled: [`FILTER_TIMEOUT`], shorter in
    /// tests.
    filter_timeout: Duration,
    /// Held by `eth_sendTransaction` from the nonce it reads to the send
    /// (geth's nonce lock): two at once from one account took one nonce.
    signing: Mutex<()>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The client an address stands for, as filters are counted: an IPv4
/// address itself (an IPv4-mapped IPv6 one too), and for IPv6 its /64
/// network: one host is commonly given a whole /64, so counting by
/// address would let it take every filter in turn. Clients behind one
/// proxy or NAT share an address, and so a share: the gateway sees no
/// further.
pub fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !(u128::from(u64::MAX)),
            )),
        },
    }
}

impl Chain {
    /// The chain `chain_id`, with the dev accounts funded and a genesis
    /// block, keeping at most `tx_budget` bytes of signed transactions.
    pub fn new(chain_id: u64, tx_budget: usize) -> Chain {
        let mut accounts = HashMap::new();
        for (address, _) in DEV_ACCOUNTS {
            let address: Address = address.parse().expect("a valid address");
            let mut account = Account::default();
            account.set(0, U256::from(DEV_BALANCE_WEI), 0);
            accounts.insert(address, account);
        }
        let mut state = State {
            accounts,
            blocks: Vec::new(),
            by_hash: HashMap::new(),
            txs: HashMap::new(),
            heads: Watchers::default(),
            pending_hashes: Watchers::default(),
            pending_full: Watchers::default(),
            logs: Watchers::default(),
            filters: HashMap::new(),
            filters_by_owner: HashMap::new(),
            swept: None,
            tx_bytes: 0,
        };
        state.mine(Vec::new(), Vec::new(), now());
        Chain {
            chain_id,
            tx_budget,
            state: Mutex::new(state),
            filter_timeout: FILTER_TIMEOUT,
            signing: Mutex::new(()),
        }
    }

    /// The chain with filters living `timeout` unpolled (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn with_filter_timeout(mut self, timeout: Duration) -> Chain {
        self.filter_timeout = timeout;
        self
    }

    /// The lock `eth_sendTransaction` holds from choosing a nonce until
    /// its transaction is taken or refused.
    pub fn signing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.signing.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The chain id.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The head's number.
    pub fn head(&self) -> u64 {
        self.lock().head()
    }

    /// Mines an empty block (the `--block-time` timer).
    pub fn mine_empty(&self) {
        self.lock().mine(Vec::new(), Vec::new(), now());
    }

    /// A `newHeads` subscription: the header of every block mined from now
    /// on goes to `sink`, until it closes. Returns how many subscriptions
    /// the chain holds now.
    pub fn watch_heads(&self, sink: Sink) -> usize {
        self.lock().heads.add(sink)
    }

    /// A `newPendingTransactions` subscription: every transaction accepted
    /// from now on goes to `sink` as its hash, or with `full` whole, until
    /// it closes. Returns how many such subscriptions the chain holds.
    pub fn watch_pending(&self, sink: Sink, full: bool) -> usize {
        let mut s = self.lock();
        if full {
            s.pending_full.add(sink)
        } else {
            s.pending_hashes.add(sink)
        }
    }

    /// A `logs` or `syncing` subscription: quiet, as nothing emits logs and
    /// the chain never syncs, but open until unsubscribed. Returns how many such subscriptions the chain holds.
    pub fn watch_logs(&self, sink: Sink) -> usize {
        self.lock().logs.add(sink)
    }

    /// Installs a filter reporting what comes after the current head, for
    /// the client at `owner` (`None`: over IPC). At most [`MAX_FILTERS`]
    /// are installed at once, [`MAX_FILTERS_PER_CLIENT`] by one client
    /// ([`client_of`]: an IPv6 client is its /64).
    pub fn new_filter(
        &self,
        kind: FilterKind,
        owner: Option<IpAddr>,
    ) -> Result<SubscriptionId, RpcError> {
        let owner = owner.map(client_of);
        let mut s = self.lock();
        let timeout = self.filter_timeout;
        let full = |s: &State| {
            if s.filters.len() >= MAX_FILTERS {
                Some(("", MAX_FILTERS))
            } else if s.filters_by_owner.get(&owner).copied().unwrap_or(0) >= MAX_FILTERS_PER_CLIENT
            {
                Some((" by this client", MAX_FILTERS_PER_CLIENT))
            } else {
                None
            }
        };
        // Expired ones are only found when polled, or here, at most once a
        // second: a client at its cap asking again and again would
        // otherwise scan every filter under the chain's lock each time.
        if full(&s).is_some() && s.swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY) {
            s.swept = Some(Instant::now());
            s.remove_filters(|f| f.polled.elapsed() >= timeout);
        }
        if let Some((whose, most)) = full(&s) {
            return Err(server_error(format!(
                "too many filters: {most} installed{whose} (eth_uninstallFilter removes one; one unpolled for {} s expires)",
                timeout.as_secs()
            )));
        }
        let id = SubscriptionId::random();
        let filter = Filter {
            key: id.as_u128(),
            owner,
            kind,
            seen: s.head(),
            polled: Instant::now(),
        };
        s.filters.insert(id.as_u128(), filter);
        *s.filters_by_owner.entry(owner).or_insert(0) += 1;
        Ok(id)
    }

    /// `eth_getFilterChanges`: what the filter `id` reports since it was
    /// made or last polled (a JSON array), at most [`MAX_FILTER_CHANGES`]
    /// items of whole blocks (at least one block); the poll restarts its
    /// clock.
    pub fn filter_changes(&self, id: &str) -> Result<String, RpcError> {
        let mut s = self.lock();
        let head = s.head();
        let filter = s.live_filter(id, self.filter_timeout)?;
        let from = filter.seen + 1;
        filter.polled = Instant::now();
        let (kind, key) = (filter.kind, filter.key);
        let mut o = String::from("[");
        let mut items = 0;
        let item = |o: &mut String, json: &str| {
            if o.len() > 1 {
                o.push(',');
            }
            o.push_str(json);
        };
        let mut seen = head;
        for (n, b) in s.blocks.iter().enumerate().skip(from as usize) {
            let in_block = match kind {
                FilterKind::Blocks => 1,
                FilterKind::PendingTransactions { .. } => b.txs.len(),
                FilterKind::Logs => 0,
            };
            if items > 0
                && (items + in_block > MAX_FILTER_CHANGES || o.len() > MAX_FILTER_CHANGES_BYTES)
            {
                seen = n as u64 - 1;
                break;
            }
            items += in_block;
            match kind {
                FilterKind::Blocks => item(&mut o, &hex(b.hash.as_slice())),
                FilterKind::PendingTransactions { full: false } => {
                    for t in &b.txs {
                        item(&mut o, &hex(t.as_slice()));
                    }
                }
                FilterKind::PendingTransactions { full: true } => {
                    for t in &b.txs {
                        item(&mut o, &s.tx_json(&s.txs[t]));
                    }
                }
                FilterKind::Logs => break,
            }
        }
        o.push(']');
        if let Some(filter) = s.filters.get_mut(&key) {
            filter.seen = seen;
        }
        Ok(o)
    }

    /// `eth_getFilterLogs`: every log the log filter `id` matches: none
    /// (nothing emits logs). Other filters are "not found", as in geth;
    /// this does not restart the filter's clock (geth's does not either).
    pub fn filter_logs(&self, id: &str) -> Result<String, RpcError> {
        let mut s = self.lock();
        match s.live_filter(id, self.filter_timeout)?.kind {
            FilterKind::Logs => Ok("[]".into()),
            _ => Err(filter_not_found()),
        }
    }

    /// `eth_uninstallFilter`: whether a filter `id` was installed.
    pub fn uninstall_filter(&self, id: &str) -> bool {
        let mut s = self.lock();
        // An expired filter is gone already (removed by the lookup).
        let Ok(filter) = s.live_filter(id, self.filter_timeout) else {
            return false;
        };
        let key = filter.key;
        s.remove_filter(key)
    }

    /// Balance and nonce of `address` at `block`.
    pub fn account(&self, address: Address, block: BlockId) -> Result<(U256, u64), RpcError> {
        let s = self.lock();
        let n = s.resolve(block)?;
        Ok(s.accounts
            .get(&address)
            .map(|a| a.at(n))
            .unwrap_or_default())
    }

    /// Checks that `block` exists (for `eth_getCode`, `eth_call`).
    pub fn check_block(&self, block: BlockId) -> Result<u64, RpcError> {
        self.lock().resolve(block)
    }

    /// Validates, executes and mines a signed raw transaction; returns its
    /// hash.
    pub fn send_raw(&self, raw: &[u8]) -> Result<B256, RpcError> {
        // alloy's decoder calls no bytes a bad type flag ("Unexpected type
        // flag. Got 0.").
        if raw.is_empty() {
            return Err(server_error(
                "transaction could not be decoded: empty transaction data",
            ));
        }
        if raw.len() > MAX_TX_SIZE {
            return Err(server_error(format!(
                "oversized data: transaction size {}, limit {MAX_TX_SIZE}",
                raw.len()
            )));
        }
        // Exact: bytes after the transaction are an error, as geth's
        // decoder says ("input contains more than one value").
        let tx = TxEnvelope::decode_2718_exact(raw)
            .map_err(|e| server_error(format!("transaction could not be decoded: {e}")))?;
        match tx {
            TxEnvelope::Legacy(_) | TxEnvelope::Eip2930(_) | TxEnvelope::Eip1559(_) => {}
            _ => {
                return Err(server_error(format!(
                    "transaction type not supported by the built-in chain: {}",
                    tx.tx_type() as u8
                )));
            }
        }
        match tx.chain_id() {
            Some(id) if id == self.chain_id => {}
            Some(id) => {
                return Err(server_error(format!(
                    "invalid chain id: have {id}, want {}",
                    self.chain_id
                )));
            }
            None => {
                return Err(server_error(
                    "only replay-protected (EIP-155) transactions allowed over RPC",
                ));
            }
        }
        let from = tx
            .recover_signer()
            .map_err(|_| server_error("invalid sender: the signature does not recover"))?;
        let Some(to) = tx.to() else {
            return Err(server_error(
                "contract creation is not supported by the built-in chain (it has no EVM; value transfers only)",
            ));
        };
        check_not_precompile(to)?;
        let intrinsic = intrinsic_gas(&tx);
        if tx.gas_limit() < intrinsic {
            return Err(server_error(format!(
                "intrinsic gas too low: gas {}, minimum needed {intrinsic}",
                tx.gas_limit()
            )));
        }
        let floor = floor_gas(tx.input());
        if tx.gas_limit() < floor {
            return Err(server_error(format!(
                "insufficient gas for floor data gas cost: gas {}, minimum needed {floor}",
                tx.gas_limit()
            )));
        }
        // What a transfer uses: no code runs, so its intrinsic gas, or the
        // floor when that is more.
        let used = intrinsic.max(floor);
        if tx.gas_limit() > GAS_LIMIT {
            return Err(server_error("exceeds block gas limit"));
        }
        if tx.gas_limit() > MAX_TX_GAS {
            return Err(server_error(format!(
                "transaction gas limit too high (cap: {MAX_TX_GAS}, tx: {})",
                tx.gas_limit()
            )));
        }
        if let Some(tip) = tx.max_priority_fee_per_gas()
            && tip > tx.max_fee_per_gas()
        {
            return Err(server_error(format!(
                "max priority fee per gas higher than max fee per gas: address {from}, maxPriorityFeePerGas: {tip}, maxFeePerGas: {}",
                tx.max_fee_per_gas()
            )));
        }
        if tx.max_fee_per_gas() < BASE_FEE as u128 {
            return Err(server_error(format!(
                "max fee per gas less than block base fee: address {from}, maxFeePerGas: {}, baseFee: {BASE_FEE}",
                tx.max_fee_per_gas()
            )));
        }
        let hash = *tx.tx_hash();
        let mut s = self.lock();
        // A transaction sent again was mined when first sent: its nonce is
        // used, so it is "nonce too low" below, as geth answers for a mined
        // transaction ("already known" is for one still in its pool, which
        // the built-in chain never holds).
        let kept = raw.len() + KEPT_PER_TRANSACTION;
        if s.tx_bytes.saturating_add(kept) > self.tx_budget {
            return Err(server_error(format!(
                "the built-in chain is full: it keeps {} bytes of transactions at most (--chain-tx-bytes); restart it",
                self.tx_budget
            )));
        }
        let head = s.head();
        let (balance, nonce) = s
            .accounts
            .get(&from)
            .map(|a| a.at(head))
            .unwrap_or_default();
        if tx.nonce() < nonce {
            return Err(server_error(format!(
                "nonce too low: next nonce {nonce}, tx nonce {}",
                tx.nonce()
            )));
        }
        if tx.nonce() > nonce {
            return Err(server_error(format!(
                "nonce too high: next nonce {nonce}, tx nonce {} (the built-in chain does not queue transactions)",
                tx.nonce()
            )));
        }
        // Checked: a value near 2^256 must not wrap the sum (U256's `+`
        // wraps) into something the balance covers.
        let cost = U256::from(tx.gas_limit())
            .checked_mul(U256::from(tx.max_fee_per_gas()))
            .and_then(|gas| gas.checked_add(tx.value()));
        if cost.is_none_or(|cost| balance < cost) {
            let want = cost.map_or_else(|| "more than 2^256".to_string(), |c| c.to_string());
            return Err(server_error(format!(
                "insufficient funds for gas * price + value: address {from} have {balance} want {want}"
            )));
        }
        let price = tx.effective_gas_price(Some(BASE_FEE));
        let number = head + 1;
        let fee = U256::from(used) * U256::from(price);
        let value = tx.value();
        s.accounts
            .entry(from)
            .or_default()
            .set(number, balance - fee - value, nonce + 1);
        let (to_balance, to_nonce) = s.accounts.get(&to).map(|a| a.at(head)).unwrap_or_default();
        // A transfer to oneself: the sender's entry already holds it.
        if to != from {
            s.accounts
                .entry(to)
                .or_default()
                .set(number, to_balance + value, to_nonce);
        } else {
            s.accounts
                .entry(from)
                .or_default()
                .set(number, balance - fee, nonce + 1);
        }
        // The priority fee goes to the block's beneficiary (the zero
        // address, as anvil's default coinbase); the base fee is burned.
        let tip = U256::from(used) * U256::from(price.saturating_sub(u128::from(BASE_FEE)));
        if !tip.is_zero() {
            let miner = s.accounts.entry(Address::ZERO).or_default();
            let (miner_balance, miner_nonce) = miner.at(number);
            miner.set(number, miner_balance + tip, miner_nonce);
        }
        s.tx_bytes += kept;
        s.txs.insert(
            hash,
            Mined {
                tx: tx.clone(),
                from,
                block: number,
                index: 0,
                gas_used: used,
                cumulative_gas_used: used,
                effective_gas_price: price,
            },
        );
        let receipt = receipt_envelope(&tx, used);
        s.mine(vec![tx], vec![receipt], now());
        Ok(hash)
    }

    /// `eth_getBlockByNumber` / `ByHash`: the block as JSON, or `null`.
    pub fn block_json(&self, block: BlockId, full: bool) -> Option<String> {
        let s = self.lock();
        let n = s.resolve(block).ok()?;
        let b = s.blocks.get(n as usize)?;
        Some(s.block_json(b, full))
    }

    /// The JSON of a transaction, or `None`.
    pub fn tx_json(&self, hash: B256) -> Option<String> {
        let s = self.lock();
        s.txs.get(&hash).map(|m| s.tx_json(m))
    }

    /// The JSON of a receipt, or `None`.
    pub fn receipt_json(&self, hash: B256) -> Option<String> {
        let s = self.lock();
        let m = s.txs.get(&hash)?;
        let b = &s.blocks[m.block as usize];
        let mut o = String::with_capacity(1024);
        o.push('{');
        kv(&mut o, "transactionHash", &hex(hash.as_slice()));
        kv(&mut o, "transactionIndex", &qty(m.index as u128));
        kv(&mut o, "blockHash", &hex(b.hash.as_slice()));
        kv(&mut o, "blockNumber", &qty(m.block as u128));
        kv(&mut o, "from", &hex(m.from.as_slice()));
        kv(&mut o, "to", &hex(m.tx.to().unwrap_or_default().as_slice()));
        kv(
            &mut o,
            "cumulativeGasUsed",
            &qty(m.cumulative_gas_used as u128),
        );
        kv(&mut o, "gasUsed", &qty(m.gas_used as u128));
        o.push_str("\"contractAddress\":null,\"logs\":[],");
        kv(&mut o, "logsBloom", &hex(&[0u8; 256]));
        kv(&mut o, "type", &qty(m.tx.tx_type() as u8 as u128));
        kv(&mut o, "effectiveGasPrice", &qty(m.effective_gas_price));
        o.push_str("\"status\":\"0x1\"}");
        Some(o)
    }

    /// `eth_feeHistory`: `count` blocks up to `newest`; `percentiles`
    /// already checked (in [0, 100], none below its predecessor).
    pub fn fee_history(
        &self,
        count: u64,
        newest: BlockNumberOrTag,
        percentiles: &[f64],
    ) -> Result<String, RpcError> {
        let s = self.lock();
        let newest = s.resolve(newest.into())?;
        let count = count.min(1024).min(newest + 1);
        if count == 0 {
            // No blocks, no history (geth and reth answer the same).
            let reward = if percentiles.is_empty() {
                ""
            } else {
                ",\"reward\":[]"
            };
            return Ok(format!(
                "{{\"oldestBlock\":\"0x0\",\"baseFeePerGas\":[],\"gasUsedRatio\":[]{reward}}}"
            ));
        }
        let oldest = newest + 1 - count;
        let mut o = String::with_capacity(256);
        let _ = write!(
            o,
            "{{\"oldestBlock\":{},\"baseFeePerGas\":[",
            qty(oldest as u128)
        );
        for i in 0..=count {
            let _ = write!(
                o,
                "{}{}",
                if i > 0 { "," } else { "" },
                qty(BASE_FEE as u128)
            );
        }
        o.push_str("],\"gasUsedRatio\":[");
        for (i, n) in (oldest..=newest).enumerate() {
            let used = s.blocks[n as usize].header.gas_used as f64 / GAS_LIMIT as f64;
            let _ = write!(o, "{}{}", if i > 0 { "," } else { "" }, used);
        }
        o.push(']');
        if !percentiles.is_empty() {
            o.push_str(",\"reward\":[");
            for (i, n) in (oldest..=newest).enumerate() {
                o.push_str(if i > 0 { ",[" } else { "[" });
                let rewards = s.rewards(&s.blocks[n as usize], percentiles);
                for (j, r) in rewards.into_iter().enumerate() {
                    let _ = write!(o, "{}{}", if j > 0 { "," } else { "" }, qty(r));
                }
                o.push(']');
            }
            o.push(']');
        }
        o.push('}');
        Ok(o)
    }

    /// Whether a block with this hash exists (`eth_getLogs` with
    /// `blockHash`).
    pub fn has_block_hash(&self, hash: B256) -> bool {
        self.lock().by_hash.contains_key(&hash)
    }
}

/// 21,000 plus the calldata (16 gas a non-zero byte, 4 a zero byte) and the
/// access list (2,400 an address, 1,900 a storage key).
pub fn intrinsic_gas(tx: &TxEnvelope) -> u64 {
    let keys = tx.access_list().into_iter().flat_map(|list| list.iter());
    calldata_gas(tx.input(), keys.map(|item| item.storage_keys.len()))
}

/// Whether `to` is a precompile of anvil's hardfork (Osaka): 0x01 to 0x11
/// (ecrecover to the BLS12-381 ones) and 0x0100 (P256VERIFY). A
/// transaction or call to one runs it on a real node, for more gas than a
/// transfer; the chain cannot.
pub fn is_precompile(to: Address) -> bool {
    let (high, low) = to.as_slice().split_at(18);
    high.iter().all(|&b| b == 0)
        && matches!(u16::from_be_bytes([low[0], low[1]]), 0x01..=0x11 | 0x100)
}

/// The error for a transaction, call or estimate to a precompile.
pub fn check_not_precompile(to: Address) -> Result<(), RpcError> {
    if is_precompile(to) {
        return Err(server_error(format!(
            "calls to precompile {to} are not supported by the built-in chain (it has no EVM; value transfers to accounts only)"
        )));
    }
    Ok(())
}

/// The gas a value transfer uses: its intrinsic gas, or the EIP-7623
/// floor of its calldata when that is more.
pub fn gas_used(tx: &TxEnvelope) -> u64 {
    intrinsic_gas(tx).max(floor_gas(tx.input()))
}

/// The EIP-7623 floor (Prague, anvil's and mainnet's rules): a transaction
/// pays at least 21,000 plus 10 gas a calldata token (a zero byte is one
/// token, any other byte four), and its gas limit must cover it.
pub fn floor_gas(input: &[u8]) -> u64 {
    let zeros = input.iter().filter(|&&b| b == 0).count() as u64;
    let tokens = zeros + 4 * (input.len() as u64 - zeros);
    TRANSFER_GAS + 10 * tokens
}

/// The intrinsic gas of calldata and of an access list given as the
/// number of storage keys of each of its addresses, for `eth_estimateGas`
/// (the same rule as [`intrinsic_gas`]; [`floor_gas`] may ask more).
pub fn calldata_gas(input: &[u8], access_list: impl IntoIterator<Item = usize>) -> u64 {
    let zeros = input.iter().filter(|&&b| b == 0).count() as u64;
    let mut gas = TRANSFER_GAS + 4 * zeros + 16 * (input.len() as u64 - zeros);
    for keys in access_list {
        gas += 2400 + 1900 * keys as u64;
    }
    gas
}

fn receipt_envelope(tx: &TxEnvelope, gas: u64) -> ReceiptEnvelope {
    let receipt = ReceiptWithBloom::new(
        Receipt {
            status: Eip658Value::Eip658(true),
            cumulative_gas_used: gas,
            logs: Vec::new(),
        },
        Default::default(),
    );
    match tx {
        TxEnvelope::Legacy(_) => ReceiptEnvelope::Legacy(receipt),
        TxEnvelope::Eip2930(_) => ReceiptEnvelope::Eip2930(receipt),
        _ => ReceiptEnvelope::Eip1559(receipt),
    }
}

impl State {
    fn head(&self) -> u64 {
        self.blocks.len() as u64 - 1
    }

    /// Removes the filter kept under `key`, counted off its owner's;
    /// whether there was one.
    fn remove_filter(&mut self, key: u128) -> bool {
        let Some(filter) = self.filters.remove(&key) else {
            return false;
        };
        self.count_off(filter.owner, 1);
        true
    }

    /// Removes the filters `gone` picks, each counted off its owner's.
    fn remove_filters(&mut self, gone: impl Fn(&Filter) -> bool) {
        let mut removed: HashMap<Option<IpAddr>, usize> = HashMap::new();
        self.filters.retain(|_, f| {
            let remove = gone(f);
            if remove {
                *removed.entry(f.owner).or_insert(0) += 1;
            }
            !remove
        });
        for (owner, n) in removed {
            self.count_off(owner, n);
        }
    }

    fn count_off(&mut self, owner: Option<IpAddr>, n: usize) {
        if let Some(count) = self.filters_by_owner.get_mut(&owner) {
            *count -= n;
            if *count == 0 {
                self.filters_by_owner.remove(&owner);
            }
        }
    }

    /// The filter `id` names, unless it expired (then removed).
    fn live_filter(&mut self, id: &str, timeout: Duration) -> Result<&mut Filter, RpcError> {
        let key = SubscriptionId::parse(id)
            .ok_or_else(filter_not_found)?
            .as_u128();
        let expired = self
            .filters
            .get(&key)
            .ok_or_else(filter_not_found)?
            .polled
            .elapsed()
            >= timeout;
        if expired {
            self.remove_filter(key);
            return Err(filter_not_found());
        }
        Ok(self.filters.get_mut(&key).expect("just found"))
    }

    fn resolve(&self, block: BlockId) -> Result<u64, RpcError> {
        let head = self.head();
        match block {
            BlockId::Tag(tag) => Ok(tag_number(tag, head)),
            BlockId::Number(n) if n <= head => Ok(n),
            BlockId::Number(n) => Err(server_error(format!(
                "block number {n:#x} is beyond the head ({head:#x})"
            ))),
            BlockId::Hash { hash, .. } => self
                .by_hash
                .get(&hash)
                .copied()
                .ok_or_else(|| server_error(format!("header for hash {hash} not found"))),
        }
    }

    /// The tip (effective gas price over the base fee) paid at each
    /// percentile of `b`'s gas used, geth's way: its transactions sorted by
    /// tip, the first whose cumulative gas reaches the percentile's share
    /// of the block's gas. An empty block's rewards are 0.
    fn rewards(&self, b: &Block, percentiles: &[f64]) -> Vec<u128> {
        let mut tips: Vec<(u128, u64)> = b
            .txs
            .iter()
            .map(|h| {
                let m = &self.txs[h];
                let tip = m.effective_gas_price.saturating_sub(u128::from(BASE_FEE));
                (tip, m.gas_used)
            })
            .collect();
        if tips.is_empty() {
            return vec![0; percentiles.len()];
        }
        tips.sort_unstable();
        let total: u64 = tips.iter().map(|&(_, gas)| gas).sum();
        let (mut i, mut sum) = (0, tips[0].1);
        percentiles
            .iter()
            .map(|p| {
                let threshold = (total as f64 * p / 100.0) as u64;
                while sum < threshold && i < tips.len() - 1 {
                    i += 1;
                    sum += tips[i].1;
                }
                tips[i].0
            })
            .collect()
    }

    fn mine(&mut self, txs: Vec<TxEnvelope>, receipts: Vec<ReceiptEnvelope>, time: u64) {
        let number = self.blocks.len() as u64;
        let (parent_hash, parent_time) = match self.blocks.last() {
            Some(b) => (b.hash, b.header.timestamp),
            None => (B256::ZERO, 0),
        };
        let used: u64 = txs.iter().map(gas_used).sum();
        let tx_hashes: Vec<B256> = txs.iter().map(|t| *t.tx_hash()).collect();
        let mut digest = Vec::with_capacity(8 + 32 * tx_hashes.len());
        digest.extend_from_slice(&number.to_be_bytes());
        for h in &tx_hashes {
            digest.extend_from_slice(h.as_slice());
        }
        let header = Header {
            parent_hash,
            ommers_hash: EMPTY_OMMER_ROOT_HASH,
            beneficiary: Address::ZERO,
            state_root: alloy_primitives::keccak256(&digest),
            transactions_root: alloy_consensus::proofs::calculate_transaction_root(&txs),
            receipts_root: alloy_consensus::proofs::calculate_receipt_root(&receipts),
            number,
            gas_limit: GAS_LIMIT,
            gas_used: used,
            // Strictly after the parent's, as a header must be (blocks
            // mined within one second get one second each).
            timestamp: if number == 0 {
                time
            } else {
                time.max(parent_time + 1)
            },
            base_fee_per_gas: Some(BASE_FEE),
            ..Default::default()
        };
        let hash = header.hash_slow();
        // `size`: the block's RLP length (header, transactions, no uncles),
        // as geth and anvil report it.
        let body = alloy_consensus::BlockBody {
            transactions: txs,
            ommers: Vec::new(),
            withdrawals: None,
        };
        let size = alloy_consensus::Block::rlp_length_for(&header, &body);
        self.by_hash.insert(hash, number);
        self.blocks.push(Block {
            header,
            hash,
            size,
            txs: tx_hashes,
        });
        // A transaction's notification before its block's header, as a
        // node's pool sees it first.
        let block = &self.blocks[number as usize];
        for t in &block.txs {
            self.pending_hashes.send(|| hex(t.as_slice()));
            let mined = &self.txs[t];
            let full = &mut self.pending_full;
            full.send(|| tx_json_of(&self.blocks, mined));
        }
        self.heads
            .send(|| header_json(&self.blocks[number as usize]));
    }

    fn block_json(&self, b: &Block, full: bool) -> String {
        let mut o = String::with_capacity(1200 + b.txs.len() * 700);
        o.push('{');
        header_fields(&mut o, b);
        kv(&mut o, "totalDifficulty", "\"0x0\"");
        kv(&mut o, "size", &qty(b.size as u128));
        o.push_str("\"uncles\":[],\"transactions\":[");
        for (i, t) in b.txs.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            if full {
                o.push_str(&self.tx_json(&self.txs[t]));
            } else {
                o.push_str(&hex(t.as_slice()));
            }
        }
        o.push_str("]}");
        o
    }

    fn tx_json(&self, m: &Mined) -> String {
        tx_json_of(&self.blocks, m)
    }
}

/// A mined transaction's JSON (`eth_getTransactionByHash`).
fn tx_json_of(blocks: &[Block], m: &Mined) -> String {
    let tx = &m.tx;
    let mut o = String::with_capacity(700);
    o.push('{');
    kv(&mut o, "hash", &hex(tx.tx_hash().as_slice()));
    kv(&mut o, "type", &qty(tx.tx_type() as u8 as u128));
    if let Some(id) = tx.chain_id() {
        kv(&mut o, "chainId", &qty(id as u128));
    }
    kv(&mut o, "nonce", &qty(tx.nonce() as u128));
    kv(
        &mut o,
        "blockHash",
        &hex(blocks[m.block as usize].hash.as_slice()),
    );
    kv(&mut o, "blockNumber", &qty(m.block as u128));
    kv(&mut o, "transactionIndex", &qty(m.index as u128));
    kv(&mut o, "from", &hex(m.from.as_slice()));
    match tx.to() {
        Some(to) => kv(&mut o, "to", &hex(to.as_slice())),
        None => kv(&mut o, "to", "null"),
    }
    kv(&mut o, "value", &qty_u256(tx.value()));
    kv(&mut o, "gas", &qty(tx.gas_limit() as u128));
    kv(&mut o, "input", &hex(tx.input()));
    match tx {
        TxEnvelope::Eip1559(_) => {
            kv(&mut o, "maxFeePerGas", &qty(tx.max_fee_per_gas()));
            let tip = tx.max_priority_fee_per_gas().unwrap_or_default();
            kv(&mut o, "maxPriorityFeePerGas", &qty(tip));
            kv(&mut o, "gasPrice", &qty(m.effective_gas_price));
        }
        _ => kv(&mut o, "gasPrice", &qty(tx.gas_price().unwrap_or_default())),
    }
    if let Some(list) = tx.access_list() {
        o.push_str("\"accessList\":[");
        for (i, item) in list.iter().enumerate() {
            let _ = write!(
                o,
                "{}{{\"address\":{},\"storageKeys\":[",
                if i > 0 { "," } else { "" },
                hex(item.address.as_slice())
            );
            for (j, k) in item.storage_keys.iter().enumerate() {
                let _ = write!(o, "{}{}", if j > 0 { "," } else { "" }, hex(k.as_slice()));
            }
            o.push_str("]}");
        }
        o.push_str("],");
    }
    let sig = tx.signature();
    let parity = sig.v() as u128;
    let v = match (tx, tx.chain_id()) {
        (TxEnvelope::Legacy(_), Some(id)) => id as u128 * 2 + 35 + parity,
        (TxEnvelope::Legacy(_), None) => 27 + parity,
        _ => {
            kv(&mut o, "yParity", &qty(parity));
            parity
        }
    };
    kv(&mut o, "v", &qty(v));
    kv(&mut o, "r", &qty_u256(sig.r()));
    o.push_str("\"s\":");
    o.push_str(&qty_u256(sig.s()));
    o.push('}');
    o
}

/// A block's header as `newHeads` sends it: the block's fields without
/// its transactions, uncles, size and total difficulty, as geth sends it.
fn header_json(b: &Block) -> String {
    let mut o = String::with_capacity(1100);
    o.push('{');
    header_fields(&mut o, b);
    o.pop();
    o.push('}');
    o
}

/// The header's fields and the block's hash, each as `"key":value,`: what a
/// block object and a `newHeads` notification share.
fn header_fields(o: &mut String, b: &Block) {
    let h = &b.header;
    kv(o, "hash", &hex(b.hash.as_slice()));
    kv(o, "parentHash", &hex(h.parent_hash.as_slice()));
    kv(o, "sha3Uncles", &hex(h.ommers_hash.as_slice()));
    kv(o, "miner", &hex(h.beneficiary.as_slice()));
    kv(o, "stateRoot", &hex(h.state_root.as_slice()));
    kv(o, "transactionsRoot", &hex(h.transactions_root.as_slice()));
    kv(o, "receiptsRoot", &hex(h.receipts_root.as_slice()));
    kv(o, "logsBloom", &hex(h.logs_bloom.as_slice()));
    kv(o, "difficulty", "\"0x0\"");
    kv(o, "number", &qty(h.number as u128));
    kv(o, "gasLimit", &qty(h.gas_limit as u128));
    kv(o, "gasUsed", &qty(h.gas_used as u128));
    kv(o, "timestamp", &qty(h.timestamp as u128));
    kv(o, "extraData", "\"0x\"");
    kv(o, "mixHash", &hex(h.mix_hash.as_slice()));
    kv(o, "nonce", &hex(h.nonce.as_slice()));
    kv(o, "baseFeePerGas", &qty(BASE_FEE as u128));
}

/// `"key":value,`
fn kv(o: &mut String, key: &str, value: &str) {
    o.push('"');
    o.push_str(key);
    o.push_str("\":");
    o.push_str(value);
    o.push(',');
}

/// A QUANTITY, quoted.
pub fn qty(v: u128) -> String {
    format!("\"{v:#x}\"")
}

fn qty_u256(v: U256) -> String {
    format!("\"{v:#x}\"")
}

/// DATA, quoted.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(4 + 2 * bytes.len());
    s.push_str("\"0x");
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s.push('"');
    s
}

/// Writes a JSON text made here (hex and numbers only) as the result.
pub fn raw(reply: Reply<'_>, json: &str) -> Result<Done, RpcError> {
    reply.raw(json.as_bytes())
}
