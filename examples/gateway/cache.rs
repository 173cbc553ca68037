//! The response cache: results that can never change, answered without
//! asking an upstream again (`--cache-bytes`, on by default).
//!
//! What may be kept comes from the method catalogue's [`Cache`] class
//! (methods not in the catalogue: never) and the call's block parameter,
//! read with the toolkit's decoders:
//!
//! | class | kept when |
//! | --- | --- |
//! | constant (`web3_sha3`; `eth_chainId` and `net_version` keep their own slot) | always |
//! | by block, the block named by hash (or `{"blockHash":…}`) | the hash was learnt to be the canonical block of a number at or below the finalized block (not with `requireCanonical: true`, which a reorg can turn into an error) |
//! | by block, the block named by number (or `{"blockNumber":…}`) | the number is at or below the finalized block known before the call was sent |
//! | by block, a log filter | `blockHash` learnt as above, or `fromBlock` and `toBlock` both numbers, `toBlock` final as above |
//! | by transaction hash | the result's `blockNumber` is at or below the finalized block known before the call was sent |
//!
//! A hash is learnt in a task of its own after a call names it (the call
//! itself is forwarded and not kept): the first upstream's
//! `eth_getBlockByHash [hash, false]` gives its number, and once that
//! number is final, `eth_getBlockByNumber [number, false]` must name the
//! same hash. Kept at once, an answer by hash was kept for the process's
//! life even when the node did not know the block yet (answers such as
//! `"0x"` or `[]` for an unknown block), or when the block was later
//! reorganised away (reth forgets such blocks: its answers become `null`).
//! What is learnt of at most [`HASHES_KEPT`] hashes is remembered.
//!
//! "Known before the call was sent": an answer given while its block could
//! still be replaced is never kept, even when the block is final by the
//! time the answer arrives (the call that learns the finalized block is
//! forwarded and not kept; the calls after it are).
//!
//! A block's traces with a transaction's entry in error (a tracer's
//! timeout on a busy node) are not kept either ([`is_whole`]).
//!
//! `latest`, `safe`, `pending`, `finalized`, `earliest` (with history
//! expiry, the first block a node still keeps: it moves when history is
//! pruned further) and an absent block param are never kept, nor params the decoders refuse (forwarded as they are: the
//! upstream answers them), errors, `null` results, results larger than a
//! sixteenth of the cache, and answers from any upstream but the first
//! `--upstream` (the gateway does not check that its upstreams serve one
//! chain, so a fallback's answer may be another chain's).
//!
//! With `--archive`, a call sent to the archive nodes ([`crate::archive`])
//! is kept under the same rules when the first `--archive` answered it:
//! for that call it is what the first `--upstream` is for the others, the
//! node every such call goes to while it is up (a full node cannot answer
//! it), so a kept answer is what the next call would get from it anyway;
//! a fallback archive's answer is not kept, as a fallback upstream's. The
//! finalized block is still the first `--upstream`'s.
//!
//! The finalized block is the first upstream's answer to
//! `eth_getBlockByNumber ["finalized", false]`, asked only when a call
//! needs a block past the one known, at most once per `--finalized-every`
//! (calls arriving while it is asked wait for that answer instead of asking
//! too); never in the background. It only grows, so a block once final
//! stays final without asking again. Until it is known, or when asking
//! fails, calls are forwarded and nothing is kept.
//!
//! "Final" is the node's word: a dev chain that rewrites its history
//! (anvil's `anvil_reset`, `evm_revert`) makes kept results stale, so run
//! the gateway in front of one with `--cache-bytes 0`.
//!
//! The key is the method name and the params' bytes as the client sent
//! them, with no canonicalisation: `["0x1",false]` and `[ "0x1", false ]`
//! are two entries (clients send the same bytes for the same call, and
//! reading params into a canonical form would cost every call what only a
//! rare differently-spelt duplicate gains). The value is a copy of the
//! result's bytes (the answer is a slice of the upstream's reply buffer,
//! which must not be kept alive by it); a hit is written with the client's
//! own id, as any answer.
//!
//! One cache for all workers, behind a mutex held for a lookup or an
//! insert only (no await under it, the value copied before): connections
//! spread over the workers by the kernel, so a cache per worker would
//! hold each result once per worker (the memory bound divided by the
//! workers for the same hit rate) and miss on one worker what another
//! learnt; a lookup is a hash and a few index swaps, short next to the
//! upstream round trip a hit saves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpcwire::bytes::Bytes;
use rpcwire::dispatch::OwnedParams;
use rpcwire::eth::catalogue::{self, BlockParam, Method};
use rpcwire::eth::{B256, BlockId, BlockNumberOrTag, EthValue};
use rpcwire::json::RawJson;

use crate::upstream::Upstreams;

/// What an entry holds on the heap besides its key's and value's bytes:
/// the key's reference counts (16), the value's shared header once a hit
/// clones it (32), and the allocator's header and rounding on those three
/// allocations (about 16 each). Its slot and map entry are counted with
/// the tables they sit in (see `Lru::tables`).
pub const ENTRY_OVERHEAD: usize = 96;

/// When a call's result may be kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Whatever the chain does (constants, pure functions).
    Always,
    /// Once this block number is final.
    Final(u64),
    /// Once the block the result names (`blockNumber`) is final.
    ByTransaction,
    /// Once this block hash is learnt to be a final block's, canonical
    /// ([`BlockHashes`]).
    ByHash(B256),
}

/// Whether `method`'s call with `params` may be answered from the cache,
/// and when its result may be kept; `None`: never (forward as usual).
pub fn keep(method: &Method, params: Option<&OwnedParams>) -> Option<Keep> {
    match method.cache {
        catalogue::Cache::Never => None,
        catalogue::Cache::Static => Some(Keep::Always),
        catalogue::Cache::ByTransaction => Some(Keep::ByTransaction),
        catalogue::Cache::ByBlock => {
            let params = params?.view();
            let at = |p: u8| params.nth(p as usize);
            match method.block {
                BlockParam::None => None,
                BlockParam::Id(p) => by_id(at(p)?.block_id().ok()?),
                BlockParam::Number(p) => by_number(at(p)?.block_number().ok()?),
                BlockParam::Hash(p) => at(p)?.hash().ok().map(Keep::ByHash),
                BlockParam::Filter(p) if method.name == "trace_filter" => by_trace_filter(at(p)?),
                BlockParam::Filter(p) => by_filter(at(p)?),
                BlockParam::StateContext(p) => {
                    // erigon's `StateContext`: what else Go's decoder reads
                    // as its block (`BlockNumber`, a repeated member) must
                    // not be missed.
                    let context = at(p)?;
                    if !only_members(context, &STATE_CONTEXT_MEMBERS) {
                        return None;
                    }
                    by_id(context.as_params()?.get("blockNumber")?.block_id().ok()?)
                }
            }
        }
    }
}

fn by_id(id: BlockId) -> Option<Keep> {
    match id {
        BlockId::Hash {
            require_canonical: Some(true),
            ..
        } => None,
        BlockId::Hash { hash, .. } => Some(Keep::ByHash(hash)),
        BlockId::Number(n) => Some(Keep::Final(n)),
        // `earliest` too: with history expiry it names the first block a
        // node still keeps (geth redefined it for pruned history), which
        // moves when the node's history is pruned further.
        BlockId::Tag(_) => None,
    }
}

fn by_number(b: BlockNumberOrTag) -> Option<Keep> {
    by_id(b.into())
}

/// The members of erigon's state context (`eth_callMany`'s second param).
pub const STATE_CONTEXT_MEMBERS: [&str; 2] = ["blockNumber", "transactionIndex"];

/// Whether the object `v` has only members named exactly as in `names`
/// (no escapes), each at most once. What else a node reads into a known
/// member must not be missed here: geth's Go decoder matches names
/// without regard to case and keeps the last of repeated ones, so
/// `{"toBlock":"0x2","ToBlock":"latest"}` ends at `latest` there.
pub fn only_members(v: RawJson<'_>, names: &[&str]) -> bool {
    let Some(object) = v.as_params().filter(|o| o.is_object()) else {
        return false;
    };
    let mut seen = 0u32;
    object.entries().all(|(key, _)| {
        let Some(at) = key
            .as_str()
            .and_then(|k| names.iter().position(|n| *n == k))
        else {
            return false;
        };
        let first = seen & (1 << at) == 0;
        seen |= 1 << at;
        first
    })
}

/// A log filter (`eth_getLogs`): by its `blockHash`, or by its range when
/// both ends are numbers (an absent end is `latest`); only a filter whose
/// members are all known, as written.
fn by_filter(v: RawJson<'_>) -> Option<Keep> {
    if !only_members(
        v,
        &["fromBlock", "toBlock", "blockHash", "address", "topics"],
    ) {
        return None;
    }
    let filter = v.log_filter().ok()?;
    if let Some(hash) = filter.block_hash().ok()? {
        return Some(Keep::ByHash(hash));
    }
    let number = |b: BlockNumberOrTag| match b {
        BlockNumberOrTag::Number(n) => Some(n),
        BlockNumberOrTag::Tag(_) => None,
    };
    let from = number(filter.from_block().ok()??)?;
    let to = number(filter.to_block().ok()??)?;
    Some(Keep::Final(from.max(to)))
}

/// `trace_filter`'s filter: by its range when both ends are numbers. It
/// has no `blockHash` (erigon's and reth's filters: an unknown member,
/// ignored there, so the range is open to the head).
fn by_trace_filter(v: RawJson<'_>) -> Option<Keep> {
    let known = [
        "fromBlock",
        "toBlock",
        "fromAddress",
        "toAddress",
        "after",
        "count",
        "mode",
    ];
    if !only_members(v, &known) {
        return None;
    }
    let filter = v.as_params()?;
    let number = |name| match filter.get(name)?.block_number().ok()? {
        BlockNumberOrTag::Number(n) => Some(n),
        BlockNumberOrTag::Tag(_) => None,
    };
    Some(Keep::Final(number("fromBlock")?.max(number("toBlock")?)))
}

/// The key of a call: the method, and after a NUL (no catalogued name
/// holds one) the params' bytes as sent.
pub fn key(method: &str, params: Option<&[u8]>) -> Vec<u8> {
    let mut key = Vec::with_capacity(method.len() + 1 + params.map_or(0, <[u8]>::len));
    key.extend_from_slice(method.as_bytes());
    if let Some(p) = params {
        key.push(0);
        key.extend_from_slice(p);
    }
    key
}

/// Entries, least recently used last; the bound in bytes.
pub struct Cache {
    limit: usize,
    lru: Mutex<Lru>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// The finalized block, as far as the gateway knows it.
    pub finality: Finality,
    /// What the gateway learnt of the block hashes calls named.
    pub hashes: BlockHashes,
}

/// The most block hashes whose state [`BlockHashes`] remembers; past it,
/// it forgets them all (and learns again what calls name).
pub const HASHES_KEPT: usize = 4096;

/// The most hashes learnt at once (each task asks the first upstream one
/// or two questions).
const HASHES_LEARNT_AT_ONCE: usize = 8;

/// How long a hash the first upstream did not know (or an ask about it
/// that failed) is not asked about again: a client naming a hash no
/// node has, or the first upstream down, would otherwise cost an ask per
/// call.
const UNKNOWN_FOR: Duration = Duration::from_secs(2);

/// What is known of a block hash a call named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashState {
    /// A task is learning it.
    Learning,
    /// The first upstream did not know it (or did not answer) then.
    Unknown(Instant),
    /// The first upstream has it as block `number`, not final when asked:
    /// checked once the finalized block passes it.
    Number(u64),
    /// The canonical block of its number, which is final: results by it
    /// may be kept.
    Final,
    /// Not the canonical block of its number, a final one: results by it
    /// are never kept (the node may forget it).
    Replaced,
}

/// The block hashes calls named, and what is known of them.
#[derive(Default)]
pub struct BlockHashes {
    inner: Mutex<Hashes>,
}

#[derive(Default)]
struct Hashes {
    states: HashMap<B256, HashState>,
    /// How many of them are [`HashState::Learning`].
    learning: usize,
}

/// What to do about a hash a call named whose results are not known to
/// be keepable yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashStep {
    /// Ask the first upstream for its number, then as [`HashStep::Check`].
    Ask,
    /// Its number is final: check that it is the canonical block's.
    Check(u64),
    /// Its number is not final yet: learn the finalized block.
    AwaitFinality(u64),
    /// Nothing now (being learnt, replaced, unknown a moment ago, or too
    /// many learnt at once).
    Nothing,
}

impl BlockHashes {
    /// Whether results by `hash` may be kept.
    pub fn is_final(&self, hash: &B256) -> bool {
        lock(&self.inner).states.get(hash) == Some(&HashState::Final)
    }

    /// What to do about `hash`, with `finalized` the finalized block
    /// known; marks it [`HashState::Learning`] when a task is to start
    /// (which then calls [`learnt`](BlockHashes::learnt)).
    pub fn next_step(&self, hash: B256, finalized: Option<u64>) -> HashStep {
        let mut inner = lock(&self.inner);
        let step = match inner.states.get(&hash) {
            None => HashStep::Ask,
            Some(HashState::Unknown(at)) if at.elapsed() >= UNKNOWN_FOR => HashStep::Ask,
            Some(HashState::Number(n)) if finalized.is_some_and(|f| *n <= f) => HashStep::Check(*n),
            Some(HashState::Number(n)) => return HashStep::AwaitFinality(*n),
            Some(_) => return HashStep::Nothing,
        };
        if inner.learning >= HASHES_LEARNT_AT_ONCE {
            return HashStep::Nothing;
        }
        if inner.states.len() >= HASHES_KEPT && !inner.states.contains_key(&hash) {
            // Forgotten, but for those being learnt (their tasks set them).
            inner.states.retain(|_, s| *s == HashState::Learning);
        }
        inner.states.insert(hash, HashState::Learning);
        inner.learning += 1;
        step
    }

    /// What a task learnt of `hash` (`None`: nothing, [`HashState::Unknown`]
    /// from now).
    pub fn learnt(&self, hash: B256, state: Option<HashState>) {
        let mut inner = lock(&self.inner);
        let state = state.unwrap_or(HashState::Unknown(Instant::now()));
        if inner.states.insert(hash, state) == Some(HashState::Learning) {
            inner.learning -= 1;
        }
    }

    /// How many hashes are being learnt.
    #[cfg_attr(not(test), allow(dead_code, reason = "the tests wait on it"))]
    pub fn learning(&self) -> usize {
        lock(&self.inner).learning
    }
}

/// What `/metrics` shows of the cache.
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: usize,
    pub bytes: usize,
    pub limit: usize,
}

const NIL: usize = usize::MAX;

/// A least-recently-used list over a slab: the map finds a slot, the
/// slots link most recent to least; every operation O(1).
#[derive(Default)]
struct Lru {
    map: HashMap<Arc<[u8]>, usize>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// The most recently used slot, and the least.
    head: usize,
    tail: usize,
    /// The entries' keys, values and [`ENTRY_OVERHEAD`]s.
    bytes: usize,
    /// What evicted slots hold in place of a key (shared: no allocation).
    empty: Arc<[u8]>,
}

struct Slot {
    key: Arc<[u8]>,
    value: Bytes,
    prev: usize,
    next: usize,
}

impl Lru {
    fn new() -> Lru {
        Lru {
            head: NIL,
            tail: NIL,
            empty: Arc::from(&[][..]),
            ..Lru::default()
        }
    }

    /// The bytes the slab and the map take, by their capacity: they grow
    /// together (doubling) as the entries do and never shrink, so with many
    /// small entries they are a large part of the cache (a slot is 64
    /// bytes, a map bucket 25, for a balance of 5 bytes).
    fn tables(&self) -> usize {
        tables(self.slots.capacity(), self.map.capacity())
    }

    /// The tables' growth the next insert needs: none while a slot is
    /// free, else both doubled.
    fn growth(&self) -> usize {
        if !self.free.is_empty() || self.slots.len() < self.slots.capacity() {
            return 0;
        }
        let to = (self.slots.capacity() * 2).max(MIN_SLOTS);
        tables(to, to).saturating_sub(self.tables())
    }

    /// Grows the slab and the map together (so that the map, holding no
    /// more entries than the slab has slots, never grows on its own).
    fn grow(&mut self) {
        let to = (self.slots.capacity() * 2).max(MIN_SLOTS);
        self.slots.reserve_exact(to - self.slots.len());
        self.map.reserve(to - self.map.len());
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.slots[i].prev, self.slots[i].next);
        match prev {
            NIL => self.head = next,
            p => self.slots[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n].prev = prev,
        }
    }

    fn push_front(&mut self, i: usize) {
        self.slots[i].prev = NIL;
        self.slots[i].next = self.head;
        match self.head {
            NIL => self.tail = i,
            h => self.slots[h].prev = i,
        }
        self.head = i;
    }

    fn get(&mut self, key: &[u8]) -> Option<Bytes> {
        let i = *self.map.get(key)?;
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        Some(self.slots[i].value.clone())
    }

    fn evict_last(&mut self) {
        let i = self.tail;
        if i == NIL {
            return;
        }
        self.unlink(i);
        let slot = &mut self.slots[i];
        let (key, value) = (
            std::mem::replace(&mut slot.key, Arc::clone(&self.empty)),
            std::mem::take(&mut slot.value),
        );
        self.bytes -= cost(&key, &value);
        self.map.remove(&key);
        self.free.push(i);
    }

    fn insert(&mut self, key: Arc<[u8]>, value: Bytes, limit: usize) {
        if self.get(&key).is_some() {
            // The same immutable result, kept already.
            return;
        }
        let size = cost(&key, &value);
        // Evicting frees a slot, which spares the tables' growth.
        while self.bytes + self.tables() + self.growth() + size > limit {
            if self.tail == NIL {
                return; // Not even alone: the tables take the room.
            }
            self.evict_last();
        }
        if self.growth() > 0 {
            self.grow();
        }
        let slot = Slot {
            key: Arc::clone(&key),
            value,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.push_front(i);
        self.map.insert(key, i);
        self.bytes += size;
    }
}

fn cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

/// The slab's first capacity.
const MIN_SLOTS: usize = 16;

/// The bytes of a slab of `slots` slots and a map of `capacity` entries
/// (std's map: a bucket per entry and a control byte each, at most 7/8
/// full, a power of two of them, 16 control bytes more).
fn tables(slots: usize, capacity: usize) -> usize {
    let buckets = match capacity {
        0 => return slots * size_of::<Slot>(),
        c => (c * 8 / 7).next_power_of_two(),
    };
    slots * size_of::<Slot>() + buckets * (size_of::<(Arc<[u8]>, usize)>() + 1) + 16
}

impl Cache {
    /// A cache of at most `limit` bytes (keys, values and
    /// [`ENTRY_OVERHEAD`] per entry, and the tables that find them); the
    /// finalized block asked for at most once per `finalized_every`.
    pub fn new(limit: usize, finalized_every: Duration) -> Cache {
        Cache {
            limit,
            lru: Mutex::new(Lru::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            finality: Finality::new(finalized_every),
            hashes: BlockHashes::default(),
        }
    }

    /// The result kept under `key`, counted as a hit or a miss.
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        let found = lock(&self.lru).get(key);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps `result` under `key`, evicting the least recently used
    /// entries past the bound; a result past a sixteenth of the bound is
    /// not kept (one would evict many smaller ones).
    pub fn insert(&self, key: Vec<u8>, result: &[u8]) {
        if cost(&key, result) > self.limit / 16 {
            return;
        }
        // Copied before the lock is taken.
        let (key, value) = (Arc::from(key), Bytes::copy_from_slice(result));
        lock(&self.lru).insert(key, value, self.limit);
    }

    /// Counts and sizes, for `/metrics`.
    pub fn stats(&self) -> CacheStats {
        let lru = lock(&self.lru);
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: lru.map.len(),
            bytes: lru.bytes + lru.tables(),
            limit: self.limit,
        }
    }
}

/// The finalized block: learnt from the first upstream when a call needs
/// it, at most once per `every`.
pub struct Finality {
    every: Duration,
    /// The finalized block plus one; 0: not known yet.
    known: AtomicU64,
    /// When it was last asked for; held across the asking, so that calls
    /// needing it meanwhile wait for that answer instead of asking too.
    asked: tokio::sync::Mutex<Option<Instant>>,
    /// The asks ended so far: a call that sees it move while it waited
    /// takes that answer (with an `every` shorter than an ask, the time
    /// check alone would let each waiter ask in turn, a queue of upstream
    /// requests).
    asks: AtomicU64,
    /// Whether a task is learning it ([`Finality::start_learning`]).
    learning: AtomicBool,
}

impl Finality {
    fn new(every: Duration) -> Finality {
        Finality {
            every,
            known: AtomicU64::new(0),
            asked: tokio::sync::Mutex::new(None),
            asks: AtomicU64::new(0),
            learning: AtomicBool::new(false),
        }
    }

    /// Whether a task should be started to learn whether block `n` is
    /// final: not when it is known final, while another task learns, or
    /// within `every` of the last ask (a task would find nothing to do:
    /// most calls above the finalized block come there). If so, the caller
    /// starts it and calls [`done_learning`](Finality::done_learning) when
    /// it ends.
    pub fn start_learning(&self, n: u64) -> bool {
        if self.known().is_some_and(|f| n <= f) {
            return false;
        }
        // Held: an ask is under way.
        let Ok(asked) = self.asked.try_lock() else {
            return false;
        };
        if asked.is_some_and(|at| at.elapsed() < self.every) {
            return false;
        }
        drop(asked);
        !self.learning.swap(true, Ordering::AcqRel)
    }

    /// A learning task ended.
    pub fn done_learning(&self) {
        self.learning.store(false, Ordering::Release);
    }

    /// Whether a learning task runs.
    #[cfg_attr(not(test), allow(dead_code, reason = "the tests wait on it"))]
    pub fn is_learning(&self) -> bool {
        self.learning.load(Ordering::Acquire)
    }

    /// The finalized block as known now, without asking.
    pub fn known(&self) -> Option<u64> {
        self.known.load(Ordering::Acquire).checked_sub(1)
    }

    /// Whether block `n` is final: yes if at or below the block known;
    /// else the first upstream is asked, unless it was asked less than
    /// `every` ago.
    pub async fn is_final(&self, up: &Upstreams, n: u64) -> bool {
        if self.known().is_some_and(|f| n <= f) {
            return true;
        }
        let before = self.asks.load(Ordering::Acquire);
        let mut asked = self.asked.lock().await;
        // Learnt while this waited?
        if self.known().is_some_and(|f| n <= f) {
            return true;
        }
        // Asked while this waited: that answer stands.
        if self.asks.load(Ordering::Acquire) != before
            || asked.is_some_and(|at| at.elapsed() < self.every)
        {
            return false;
        }
        // A deadline of its own: the ask runs in a task no dispatcher
        // deadline drops, under the lock every later ask takes, and an
        // upstream's reply that never came stopped the caching of newly
        // final blocks until a restart. One that ran out counts as an ask
        // (the next comes after `every`).
        let learnt = tokio::time::timeout(up.timeout(), ask_finalized(up))
            .await
            .ok()
            .flatten();
        *asked = Some(Instant::now());
        self.asks.fetch_add(1, Ordering::Release);
        if let Some(f) = learnt {
            self.known.fetch_max(f.saturating_add(1), Ordering::AcqRel);
        }
        self.known().is_some_and(|f| n <= f)
    }
}

/// The first upstream's finalized block; `None` when it does not say
/// (another upstream answered, an error, `null`, no readable `number`).
async fn ask_finalized(up: &Upstreams) -> Option<u64> {
    let (number, _) = block_header(up, "eth_getBlockByNumber", r#"["finalized",false]"#).await?;
    Some(number)
}

/// The first upstream's block with `hash`: its number, when its answer
/// names that hash (`None`: unknown there, another upstream answered, an
/// error).
pub async fn number_of_hash(up: &Upstreams, hash: B256) -> Option<u64> {
    let params = format!("[\"{hash:#x}\",false]");
    let (number, named) = block_header(up, "eth_getBlockByHash", &params).await?;
    (named? == hash).then_some(number)
}

/// The first upstream's canonical block `number`'s hash.
pub async fn hash_of_number(up: &Upstreams, number: u64) -> Option<B256> {
    let params = format!("[\"{number:#x}\",false]");
    let (at, hash) = block_header(up, "eth_getBlockByNumber", &params).await?;
    hash.filter(|_| at == number)
}

/// The number and (when readable) hash of the block `method` with
/// `params` answers, from the first upstream only; `None` when another
/// upstream answered, an error, `null`, or no readable `number`.
async fn block_header(up: &Upstreams, method: &str, params: &str) -> Option<(u64, Option<B256>)> {
    let (outcome, first) = up.forward_from(method, Some(params.as_bytes()), None).await;
    if !first {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Header<'a> {
        #[serde(borrow)]
        number: Option<&'a str>,
        #[serde(borrow)]
        hash: Option<&'a str>,
    }
    let answer = outcome.ok()?;
    let header: Header<'_> = serde_json::from_slice::<Option<Header<'_>>>(&answer.0).ok()??;
    let hash = header.hash.and_then(|h| h.parse::<B256>().ok());
    Some((quantity(header.number?)?, hash))
}

/// The block a transaction's result names (`blockNumber`: a QUANTITY, or
/// a plain number as `trace_get` writes it); `None` for `null`, a pending
/// transaction, or a result without one (raw transactions, traces).
pub fn block_of(result: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Number<'a> {
        Quantity(&'a str),
        Plain(u64),
    }
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(borrow, rename = "blockNumber")]
        block_number: Option<Number<'a>>,
    }
    if result.first() != Some(&b'{') {
        return None;
    }
    match serde_json::from_slice::<Named<'_>>(result)
        .ok()?
        .block_number?
    {
        Number::Quantity(q) => quantity(q),
        Number::Plain(n) => Some(n),
    }
}

/// Whether `method`'s `result` is whole, as the next call would get it:
/// a block's traces (`debug_traceBlockByNumber`, `…ByHash`) with a
/// transaction's entry in error are not (geth
/// gives each transaction its own deadline, a JavaScript tracer's default
/// 5 s: `{"txHash":…,"error":"execution timeout"}` in an answer that
/// succeeds, where a less busy node traces it whole). Other results are.
pub fn is_whole(method: &str, result: &[u8]) -> bool {
    if !matches!(
        method,
        "debug_traceBlockByNumber" | "debug_traceBlockByHash"
    ) {
        return true;
    }
    #[derive(serde::Deserialize)]
    struct Traced {
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Vec<Traced>>(result)
        .is_ok_and(|traces| traces.iter().all(|t| t.error.is_none()))
}

/// A QUANTITY (`0x1b4`) that fits in a `u64`.
fn quantity(q: &str) -> Option<u64> {
    let digits = q.strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 16 || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
