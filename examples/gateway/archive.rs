//! Calls on old state sent to archive nodes (`--archive URL`).
//!
//! A full node keeps the state (accounts, code, storage) of recent blocks
//! only (geth the last 128, reth's full node about 10,064), while it keeps
//! every block, transaction, receipt and log; an archive node keeps the
//! state of every block, at a far higher cost to run. With `--archive`,
//! the `--upstream`s are taken for full nodes keeping `--state-blocks`
//! blocks of state, and the calls of the methods that read state at their
//! block ([`Method::reads_state`]) go:
//!
//! | the call's block | to |
//! | --- | --- |
//! | a number (or `{"blockNumber":…}`) not among the `--state-blocks` latest (at or below the head less `--state-blocks`) | the archive nodes |
//! | `earliest` | the archive nodes |
//! | a recent number, `latest`, `pending`, `safe`, `finalized`, absent | the full nodes |
//! | a hash (or `{"blockHash":…}`), or none in the params (a transaction's traces, `debug_traceBlock`'s block) | the full nodes, and again to the archive nodes (once) when they answer that the state is gone ([`missing_state`]) |
//!
//! A state reader sent to the full nodes and answered with a missing-state
//! error is retried on the archive nodes whatever its block: the head the
//! gateway knows may be a second old, and a node's retention is its own.
//! Every other method goes to the full nodes as without `--archive`.
//! Among themselves the archive nodes fail over as the `--upstream`s do
//! (the first healthy one serves); an archive that cannot be reached fails
//! the call it was asked for with the gateway's -32603 naming it, nothing
//! else.
//!
//! The head is the full nodes' `eth_blockNumber`, asked only when a call
//! on a numbered block arrives and it was last asked for (answered or
//! not) more than [`HEAD_FRESH`] ago; calls arriving while it is asked
//! wait for that answer (as [`crate::cache::Finality`] does for the
//! finalized block), for a bounded time (`ask_head`); never in the background. Until it is known (or when asking fails), numbered
//! calls go to the full nodes, the missing-state retry covering them.
//! Without `--archive` none of this runs: no head is asked.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rpcwire::RpcError;
use rpcwire::dispatch::OwnedParams;
use rpcwire::eth::catalogue::{BlockParam, Method};
use rpcwire::eth::{BlockId, BlockTag, EthValue};
use rpcwire::json::RawJson;

use crate::config::Config;
use crate::upstream::{Answer, Upstreams};

/// How long the head asked for stands: a call on a numbered block needs
/// to know whether it is recent, and a second off (a block is 12 s on
/// mainnet) moves the line by a block at most.
pub const HEAD_FRESH: Duration = Duration::from_secs(1);
/// How long asking the full nodes for the head may take, at most.
pub const HEAD_ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The archive nodes and what routing to them needs.
pub struct Archive {
    /// The `--archive` list.
    pub up: Upstreams,
    /// `--state-blocks`: the recent blocks whose state the full nodes keep.
    state_blocks: u64,
    head: Head,
    /// Calls sent to the archive nodes by their block.
    pub routed: AtomicU64,
    /// Calls sent to the archive nodes after a full node's missing-state
    /// error.
    pub retried: AtomicU64,
}

/// Where a state reader's call goes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The archive nodes: its block is older than the full nodes keep.
    Archive,
    /// The full nodes (the `--upstream`s).
    Full,
}

impl Archive {
    /// The archive nodes of `config`; `None` without `--archive`.
    pub fn new(config: &Config) -> Result<Option<Archive>, String> {
        if config.archives.is_empty() {
            return Ok(None);
        }
        let mut up = Upstreams::new(&Config {
            upstreams: config.archives.clone(),
            upstream_ws: None,
            ..config.clone()
        })?;
        // Subscriptions are the `--upstream`s' business.
        up.ws = None;
        Ok(Some(Archive {
            up,
            state_blocks: config.state_blocks,
            head: Head::new(),
            routed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
        }))
    }

    /// Where the call of `method` (a state reader) with `params` goes;
    /// the head asked of `full` if the call names a block number.
    pub async fn route(
        &self,
        full: &Upstreams,
        method: &Method,
        params: Option<&OwnedParams>,
    ) -> Route {
        let n = match block_of(method, params) {
            At::Earliest => return Route::Archive,
            At::Number(n) => n,
            At::Recent | At::Unknown => return Route::Full,
        };
        match self.head.get(full).await {
            // A full node keeping the state of N blocks holds head - N + 1
            // up to the head (geth, N = 128, drops block B's state as block
            // B + 128 arrives): head - N and older are gone.
            Some(head) if n.saturating_add(self.state_blocks) <= head => Route::Archive,
            _ => Route::Full,
        }
    }

    /// Forwards to the archive nodes; the outcome, and whether the first
    /// of them answered (what the cache may keep). `deadline`: as for
    /// [`Upstreams::forward_from`].
    pub async fn forward(
        &self,
        method: &str,
        params: Option<&[u8]>,
        deadline: Option<Instant>,
    ) -> (Result<Answer, RpcError>, bool) {
        self.up.forward_from(method, params, deadline).await
    }

    /// Counts a call routed to the archive by its block.
    pub fn count_routed(&self) {
        self.routed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a call retried on the archive after a missing-state error.
    pub fn count_retried(&self) {
        self.retried.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a call's params say of its block, for routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Number(u64),
    Earliest,
    /// A tag that follows the head (`latest`, `pending`, `safe`,
    /// `finalized`), or no block param (`latest`).
    Recent,
    /// A hash, or a block the params do not name (a transaction's), or
    /// params the decoders refuse (the upstream answers those).
    Unknown,
}

fn block_of(method: &Method, params: Option<&OwnedParams>) -> At {
    let Some(params) = params else {
        return match method.block {
            BlockParam::Id(_) | BlockParam::Number(_) => At::Recent,
            _ => At::Unknown,
        };
    };
    let params = params.view();
    let at = |p: u8| params.nth(p as usize);
    match method.block {
        BlockParam::Id(p) => match at(p) {
            None => At::Recent,
            Some(v) => v.block_id().map_or(At::Unknown, by_id),
        },
        BlockParam::Number(p) => match at(p) {
            None => At::Recent,
            Some(v) => v
                .block_number()
                .map_or(At::Unknown, |b| by_id(BlockId::from(b))),
        },
        BlockParam::StateContext(p) => {
            let Some(raw) = at(p) else {
                return At::Recent;
            };
            let Some(context) = raw.as_params().filter(|c| c.is_object()) else {
                return At::Recent;
            };
            // A member Go's decoder may read as the block too (see
            // `crate::cache::only_members`): the full nodes, with the
            // missing-state retry.
            if !crate::cache::only_members(raw, &crate::cache::STATE_CONTEXT_MEMBERS) {
                return At::Unknown;
            }
            match context.get("blockNumber") {
                None => At::Recent,
                Some(v) => v.block_id().map_or(At::Unknown, by_id),
            }
        }
        BlockParam::Filter(p) => at(p).map_or(At::Unknown, by_filter),
        BlockParam::Hash(_) | BlockParam::None => At::Unknown,
    }
}

fn by_id(id: BlockId) -> At {
    match id {
        BlockId::Number(n) => At::Number(n),
        BlockId::Tag(BlockTag::Earliest) => At::Earliest,
        BlockId::Tag(_) => At::Recent,
        BlockId::Hash { .. } => At::Unknown,
    }
}

/// `trace_filter`'s range: by its oldest end, the blocks it replays. An
/// absent `fromBlock` is block 0 to erigon and reth, the nodes that serve
/// `trace_filter` today (OpenEthereum read it as `latest`): only an
/// archive holds the state that range replays.
fn by_filter(v: RawJson<'_>) -> At {
    let Ok(filter) = v.log_filter() else {
        return At::Unknown;
    };
    if filter.block_hash().ok().flatten().is_some() {
        return At::Unknown;
    }
    match filter.from_block() {
        Ok(None) => At::Earliest,
        Ok(Some(b)) => by_id(BlockId::from(b)),
        Err(_) => At::Unknown,
    }
}

/// The head: asked of the full nodes when a call needs it and the one
/// known is older than [`HEAD_FRESH`].
struct Head {
    known: Mutex<Known>,
    /// Held across an ask, so that calls needing the head meanwhile wait
    /// for that answer instead of asking too.
    asking: tokio::sync::Mutex<()>,
    /// The asks ended so far: a call that sees it move while it waited
    /// takes that answer.
    asks: AtomicU64,
}

/// The head learnt, and when it was last asked for.
#[derive(Clone, Copy, Default)]
struct Known {
    head: Option<u64>,
    /// Failed asks count too: a node that cannot say its head was asked
    /// again by every call on a numbered block.
    asked: Option<Instant>,
}

impl Head {
    fn new() -> Head {
        Head {
            known: Mutex::new(Known::default()),
            asking: tokio::sync::Mutex::new(()),
            asks: AtomicU64::new(0),
        }
    }

    fn known(&self) -> Known {
        *self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The head known, if it was asked for less than [`HEAD_FRESH`] ago
    /// (`Some(None)`: asked, no answer).
    fn fresh(&self) -> Option<Option<u64>> {
        let known = self.known();
        known
            .asked
            .is_some_and(|at| at.elapsed() < HEAD_FRESH)
            .then_some(known.head)
    }

    /// The head: the one known if asked for within [`HEAD_FRESH`], else
    /// the full nodes' answer (or, when they give none, the one known,
    /// however old: an older head only sends more calls to the full
    /// nodes, where the retry covers them).
    async fn get(&self, full: &Upstreams) -> Option<u64> {
        if let Some(head) = self.fresh() {
            return head;
        }
        let before = self.asks.load(Ordering::Acquire);
        let _asking = self.asking.lock().await;
        if self.asks.load(Ordering::Acquire) != before {
            // Asked while this waited: that answer stands.
            return self.known().head;
        }
        if let Some(head) = self.fresh() {
            return head;
        }
        let learnt = ask_head(full).await;
        let head = {
            let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            // The head only moves on (a full node behind another, after a
            // failover, would take calls back from the archive too early).
            known.head = known.head.max(learnt);
            known.asked = Some(Instant::now());
            known.head
        };
        self.asks.fetch_add(1, Ordering::Release);
        head
    }
}

/// The full nodes' `eth_blockNumber`: the first's, or the one that serves
/// in its place while it rests (the calls go to that one then); `None`
/// when none answers within the connect deadline plus
/// [`HEAD_ASK_TIMEOUT`], at most three quarters of the call's timeout
/// (the call waiting for it keeps time to run): past a first full node
/// that takes no connection, the next is asked. The calls waiting for it then go by the head
/// known: a full node that let the ask hang made them wait out their own
/// timeouts, calls the archive could have answered.
async fn ask_head(full: &Upstreams) -> Option<u64> {
    // Longer than a connect may take: equal, the ask ended as the first
    // node's connect gave up, and the next node was never asked.
    let within = (full.connect_timeout() + HEAD_ASK_TIMEOUT).min(full.timeout() * 3 / 4);
    let answer = tokio::time::timeout(within, full.forward("eth_blockNumber", None))
        .await
        .ok()?
        .ok()?;
    let q: &str = serde_json::from_slice(&answer.0).ok()?;
    let digits = q.strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Whether `e`, a node's answer to a state reader, says that the state at
/// the call's block is not kept there (so an archive node may have it),
/// in the words of:
///
/// | node | message |
/// | --- | --- |
/// | geth (hash-based state) | `missing trie node <hash> (path <path>) …` (trie/errors.go, `MissingNodeError`) |
/// | geth (path-based state) | `historical state <root> is not available` (triedb/pathdb, `HistoricReader`; core/state/database_history.go) |
/// | geth (tracers) | `required historical state unavailable (reexec=N)` (eth/state_accessor.go) |
/// | reth | `state at block #N is pruned` (storage-errors, `ProviderError::StateAtBlockPruned`) |
/// | erigon | `old data not available due to pruning` (`state.PrunedError`, HistoryReaderV3) |
/// | nethermind | `No state available for block <hash> (<number>)` (`GetStateFailureResult`, -32002/-32001) |
/// | besu | `World state unavailable` (-32000, `RpcErrorType.WORLD_STATE_UNAVAILABLE`) |
/// | anvil `--prune-history` | `BlockOutOfRangeError: block height is H but requested was N` (-32602; only for N below H: above, the block is not mined yet) |
///
/// An upstream's error object only (the gateway's own errors are not the
/// node's word), and never an execution's outcome: geth's code 3 (an
/// execution error, a revert with its data) and any message that says
/// "revert" are a contract's words, and a revert reason is its own text
/// (`execution reverted: missing trie node`, or a custom reason such as
/// `reverted: missing trie node 0xab`, would otherwise send a call to the
/// archive at the contract's will). The phrases are matched where the
/// nodes put them: at the start of the message, not anywhere in it.
pub fn missing_state(e: &RpcError) -> bool {
    #[derive(serde::Deserialize)]
    struct Object<'a> {
        #[serde(default)]
        code: Option<i64>,
        #[serde(borrow)]
        message: std::borrow::Cow<'a, str>,
    }
    let Some(raw) = e.raw_object() else {
        return false;
    };
    let Ok(object) = serde_json::from_slice::<Object<'_>>(raw) else {
        return false;
    };
    // geth's (and reth's, erigon's) code for a revert, with its data.
    if object.code == Some(3) {
        return false;
    }
    says_missing_state(&object.message)
}

/// [`missing_state`] of an error's message.
pub fn says_missing_state(message: &str) -> bool {
    let m = message.trim().to_ascii_lowercase();
    if m.contains("revert") {
        return false;
    }
    // geth (hash-based; path-based; its tracers), erigon, nethermind,
    // besu.
    if [
        "missing trie node",
        "historical state",
        "required historical state unavailable",
        "old data not available due to pruning",
        "no state available for block",
        "world state unavailable",
    ]
    .iter()
    .any(|p| m.starts_with(p))
    {
        return true;
    }
    // reth: the whole message, `state at block #N is pruned`.
    if let Some(n) = m
        .strip_prefix("state at block #")
        .and_then(|r| r.strip_suffix(" is pruned"))
    {
        return !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    }
    // anvil, the whole message: `BlockOutOfRangeError: block height is H
    // but requested was N`, N < H (above H: a block not mined yet).
    if let Some((height, requested)) = m
        .strip_prefix("blockoutofrangeerror: block height is ")
        .and_then(|r| r.split_once(" but requested was "))
        && let (Ok(height), Ok(requested)) = (height.parse::<u64>(), requested.parse::<u64>())
    {
        return requested < height;
    }
    false
}
