//! Forwarding: the router's policy per method, and the async handlers that
//! forward calls to the upstreams.
//!
//! | methods | policy |
//! | --- | --- |
//! | `eth_chainId`, `net_version` | forwarded until the first upstream answers, then answered from that answer, unless calls go to a fallback then |
//! | `eth_subscribe`, `eth_unsubscribe` | relayed over the WebSocket upstream (to clients on WebSocket or `--ipc`; HTTP has no subscriptions) |
//! | names starting with a denied prefix (`admin_`, `personal_`, `debug_` by default) | denied: -32601, `data.rule` naming the rule |
//! | the catalogue's methods whose results can be final (by block, by transaction, constant) | answered from the response cache ([`crate::cache`]) when kept there, else forwarded (and kept once final) |
//! | with `--archive`, the catalogue's methods that read state at their block | the same, forwarded to the archive nodes for old blocks ([`crate::archive`]) |
//! | subscription methods other than `eth_subscribe` / `eth_unsubscribe` (the catalogue's `debug_subscribe`, any unknown `*_subscribe` or `*_unsubscribe`) | -32601 with `data.reason`: their subscriptions would belong to the gateway's upstream connection, reach nobody and never end |
//! | the rest of the catalogue's methods | forwarded (registered, so routed through the perfect-hash table) |
//! | anything else | forwarded by the fallback, after the deny check |
//!
//! A batch is split by the dispatcher: each entry is its own async call,
//! forwarded on its own, and the replies are merged back in request order;
//! an entry that fails fails alone.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures_util::future::Either;
use rpcwire::bytes::Bytes;
use rpcwire::dispatch::{
    AsyncCall, Done, IntoResponse, Observer, OwnedParams, Reply, RpcError, WithAsync,
};
use rpcwire::eth::B256;
use rpcwire::eth::catalogue::{self, Method};
use rpcwire::server::subscriptions::{SubscriptionId, Subscriptions};
use rpcwire::{Call, Dispatcher};

use crate::archive::{self, Archive, Route};
use crate::cache::{self, Cache, Keep};
use crate::config::{self, Config};
use crate::errors;
use crate::upstream::{Answer, EndRelay, Upstreams, request_body};

/// The forwarding gateway's state.
pub struct Gateway {
    pub up: Upstreams,
    /// The forwarding handlers running, for `/health` during a drain and
    /// the account of what a drain abandoned.
    pub calls: InFlight,
    /// The response cache; `None` with `--cache-bytes 0`.
    pub cache: Option<Cache>,
    /// The archive nodes; `None` without `--archive`.
    pub archive: Option<Archive>,
    deny: Vec<String>,
    chain_id: OnceLock<Answer>,
    net_version: OnceLock<Answer>,
}

impl Gateway {
    /// Closes this worker's pooled upstream connections (the `--upstream`s'
    /// and the archives') left idle too long or closed by their server.
    pub fn reap_idle(&self, now: std::time::Instant) {
        self.up.reap_idle(now);
        if let Some(archive) = &self.archive {
            archive.up.reap_idle(now);
        }
    }

    /// Reaps this worker's idle upstream connections ([`reap_idle`]
    /// (Self::reap_idle)) twice per `--upstream-idle` until `shutdown`, so
    /// that none outlives its idle limit by more than half of it when
    /// traffic stops.
    pub async fn reap_until(self: Arc<Self>, shutdown: rpcwire::server::Shutdown) {
        let every = (self.up.max_idle() / 2).max(std::time::Duration::from_millis(1));
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.reap_idle(std::time::Instant::now()),
                _ = shutdown.triggered() => return,
            }
        }
    }
}

/// The handlers running, and the ones a shutdown's grace cut short.
///
/// The servers drop calls in two cases: their client left (at any time;
/// nothing is lost that anyone waits for), or the shutdown grace ran out
/// (calls lost). Both look alike from inside a handler, but the second
/// only happens once the grace has passed, counted from the trigger: a
/// handler dropped unfinished from then on, or still running when the
/// process exits, was abandoned by the drain.
#[derive(Default)]
pub struct InFlight {
    running: AtomicUsize,
    /// When the grace ends; set just before the shutdown is triggered.
    grace_ends: OnceLock<Instant>,
    cut: AtomicUsize,
}

impl InFlight {
    /// Runs `handler`, counted while it runs.
    pub async fn track<F: Future>(&self, handler: F) -> F::Output {
        let running = self.enter();
        let out = handler.await;
        running.finish();
        out
    }

    /// Counts a handler in until the guard is finished or dropped: for the
    /// forwarding handlers, which await their forward in place rather than
    /// through [`track`](InFlight::track) (a future moved into another is
    /// copied, and forwards' futures are large: two copies of them were
    /// 4% of the instructions per forwarded request).
    pub fn enter(&self) -> Running<'_> {
        self.running.fetch_add(1, Ordering::Relaxed);
        Running {
            calls: self,
            finished: false,
        }
    }

    /// Handlers running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Notes that a shutdown starts now and waits at most `grace`. Call it
    /// before triggering the shutdown: the servers' grace starts later.
    pub fn draining(&self, grace: std::time::Duration) {
        let _ = self.grace_ends.set(Instant::now() + grace);
    }

    /// The calls the drain abandoned: dropped unfinished after its grace,
    /// and those still running (read when the drain is over).
    pub fn abandoned(&self) -> usize {
        self.cut.load(Ordering::Relaxed) + self.running()
    }
}

/// A handler counted in by [`InFlight::enter`]; counts itself out when
/// dropped, as abandoned if the drain's grace had passed and it was not
/// [`finish`](Running::finish)ed.
pub struct Running<'a> {
    calls: &'a InFlight,
    finished: bool,
}

impl Running<'_> {
    /// The handler ran to its end.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let calls = self.calls;
        if !self.finished
            && calls
                .grace_ends
                .get()
                .is_some_and(|end| Instant::now() >= *end)
        {
            calls.cut.fetch_add(1, Ordering::Relaxed);
        }
        calls.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A forwarded call's outcome: the upstream's `result` bytes (written as
/// they are; the dispatcher writes the client's id around them), or an
/// error (an upstream's error object passes through as [`RpcError::raw`]).
pub struct Forwarded(pub Result<Answer, RpcError>);

impl IntoResponse for Forwarded {
    #[inline]
    fn into_response(self, reply: Reply<'_>) -> Result<Done, RpcError> {
        match self.0 {
            Ok(answer) => reply.raw(&answer.0),
            Err(e) => Err(e),
        }
    }
}

fn params(call: &AsyncCall<Gateway>) -> Option<&[u8]> {
    call.params.as_ref().map(|p| &p.as_bytes()[..])
}

// The handlers below are functions returning an `async move` block, not
// `async fn`s: an `async fn` keeps its argument twice in its future (as
// the argument and as the local it is moved into), and the call is 136
// bytes. The dispatcher boxes each call's future: under 1 KiB it comes
// from the allocator's per-thread cache, above it through the general
// path (`-Zprint-type-sizes`: `forward` went from 1,152 bytes to 984).

#[allow(clippy::manual_async_fn, reason = "an `async fn` keeps the call twice")]
fn forward(call: AsyncCall<Gateway>) -> impl Future<Output = Forwarded> + Send {
    async move { Forwarded(forward_counted(&call).await) }
}

/// Forwards `call` as it came, counted among the calls in flight.
async fn forward_counted(call: &AsyncCall<Gateway>) -> Result<Answer, RpcError> {
    forward_counted_from(call).await.0
}

/// [`forward_counted`], and whether the first upstream answered
/// ([`Upstreams::forward_from`](crate::upstream::Upstreams::forward_from)).
async fn forward_counted_from(call: &AsyncCall<Gateway>) -> (Result<Answer, RpcError>, bool) {
    let running = call.state.calls.enter();
    let forwarded = call
        .state
        .up
        .forward_from(call.method(), params(call), call.deadline())
        .await;
    running.finish();
    forwarded
}

/// A catalogued method whose results can be final: answered from the
/// cache when kept there, else forwarded, and the result kept when it can
/// no longer change (see [`crate::cache`]).
#[allow(clippy::manual_async_fn, reason = "an `async fn` keeps the call twice")]
fn forward_cached(
    call: AsyncCall<Gateway>,
    method: &'static Method,
) -> impl Future<Output = Forwarded> + Send {
    async move {
        // `method.name` is the call's method (the name it was routed by),
        // without `call.method()`'s UTF-8 check.
        let up = &call.state.up;
        // Forwarded in place, not through `forward`: see `InFlight::enter`.
        let running = call.state.calls.enter();
        let lookup = look_up(&call, method);
        let outcome = match lookup {
            Lookup::Kept(answer) => Ok(answer),
            // Boxed: a call whose result may be kept (its block given by
            // number or hash) waits for the finality of its block too, a
            // future of 2.6 KiB that every other call of the method would
            // carry in its box.
            Lookup::Keep(cache, keep, key) => {
                let forwarded = up.forward_from(method.name, params(&call), call.deadline());
                Box::pin(forward_and_keep(&call, method, cache, keep, key, forwarded)).await
            }
            Lookup::Pass => {
                // Dropped (it holds nothing): not kept in the future
                // across the wait.
                drop(lookup);
                up.forward_from(method.name, params(&call), call.deadline())
                    .await
                    .0
            }
        };
        running.finish();
        Forwarded(outcome)
    }
}

/// What the cache says of a call: its kept answer; or that its answer, once
/// forwarded, may be kept (under `key`, as `Keep` says); or nothing.
enum Lookup<'a> {
    Kept(Answer),
    Keep(&'a Cache, Keep, Vec<u8>),
    Pass,
}

fn look_up<'a>(call: &'a AsyncCall<Gateway>, method: &Method) -> Lookup<'a> {
    let (Some(cache), Some(keep)) = (&call.state.cache, cache::keep(method, call.params.as_ref()))
    else {
        return Lookup::Pass;
    };
    let key = cache::key(method.name, params(call));
    match cache.get(&key) {
        Some(result) => Lookup::Kept(Answer(result)),
        None => Lookup::Keep(cache, keep, key),
    }
}

/// Forwards a call the cache did not hold (with `forwarded`: the outcome,
/// and whether the first upstream of the list that served it answered),
/// and keeps its result if final.
///
/// A result is kept only when its block was known final before the call
/// was sent: an answer given while the block could still be replaced, and
/// kept because the block was final when asked a moment later, could be
/// the replaced block's for the process's life. A block not known final
/// yet is asked about in a task of its own ([`learn_finality`], at most
/// once per `--finalized-every`), so that the calls after this one find
/// it kept; the answer in hand never waits for that ask.
async fn forward_and_keep(
    call: &AsyncCall<Gateway>,
    method: &'static Method,
    cache: &Cache,
    keep: Keep,
    key: Vec<u8>,
    forwarded: impl Future<Output = (Result<Answer, RpcError>, bool)>,
) -> Result<Answer, RpcError> {
    let known_before = cache.finality.known();
    let final_before = |n: u64| known_before.is_some_and(|f| n <= f);
    let block_final = match keep {
        Keep::Final(n) if !final_before(n) => {
            learn_finality(&call.state, n);
            false
        }
        Keep::ByHash(hash) if !cache.hashes.is_final(&hash) => {
            learn_hash(&call.state, hash);
            false
        }
        _ => true,
    };
    let (outcome, first) = forwarded.await;
    let Ok(answer) = &outcome else {
        return outcome;
    };
    if !first
        || !block_final
        || &answer.0[..] == b"null"
        || !cache::is_whole(method.name, &answer.0)
    {
        return outcome;
    }
    if keep == Keep::ByTransaction {
        match cache::block_of(&answer.0) {
            Some(b) if final_before(b) => {}
            Some(b) => {
                // Learnt for the next call; this answer is not kept.
                learn_finality(&call.state, b);
                return outcome;
            }
            None => return outcome,
        }
    }
    cache.insert(key, &answer.0);
    outcome
}

/// Learns whether block `n` is final, for the calls after this one, in a
/// task of its own: the ask is an upstream round trip under a lock, and a
/// slow one held answers already in hand (fresh receipts, calls on recent
/// blocks) until they timed out. One such task at a time; its answer, the
/// finalized block, covers the other calls' blocks too.
fn learn_finality(state: &Arc<Gateway>, n: u64) {
    let Some(cache) = &state.cache else {
        return;
    };
    if !cache.finality.start_learning(n) {
        return;
    }
    /// Ends the learning however the task ends (a runtime shut down
    /// drops it unfinished).
    struct Learning(Arc<Gateway>);
    impl Drop for Learning {
        fn drop(&mut self) {
            if let Some(cache) = &self.0.cache {
                cache.finality.done_learning();
            }
        }
    }
    let learning = Learning(Arc::clone(state));
    tokio::spawn(async move {
        let state = &learning.0;
        if let Some(cache) = &state.cache {
            cache.finality.is_final(&state.up, n).await;
        }
    });
}

/// Learns, for the calls after this one, whether block `hash` is the
/// canonical block of a final number ([`cache::BlockHashes`]), in a task
/// of its own as [`learn_finality`] does: its number first (the first
/// upstream's `eth_getBlockByHash`), then, once that is final, the hash
/// of the canonical block of that number.
fn learn_hash(state: &Arc<Gateway>, hash: B256) {
    let Some(cache) = &state.cache else {
        return;
    };
    let number = match cache.hashes.next_step(hash, cache.finality.known()) {
        cache::HashStep::Ask => None,
        cache::HashStep::Check(n) => Some(n),
        cache::HashStep::AwaitFinality(n) => return learn_finality(state, n),
        cache::HashStep::Nothing => return,
    };
    /// What the task learnt; nothing if it ends otherwise (a runtime shut
    /// down drops it unfinished): asked again after a moment.
    struct Learning(Arc<Gateway>, B256, Option<cache::HashState>);
    impl Learning {
        fn learnt(&mut self, state: cache::HashState) {
            self.2 = Some(state);
        }
    }
    impl Drop for Learning {
        fn drop(&mut self) {
            if let Some(cache) = &self.0.cache {
                cache.hashes.learnt(self.1, self.2);
            }
        }
    }
    let mut learning = Learning(Arc::clone(state), hash, None);
    tokio::spawn(async move {
        let state = Arc::clone(&learning.0);
        let (Some(cache), up) = (&state.cache, &state.up) else {
            return;
        };
        let timeout = up.timeout();
        let number = match number {
            Some(n) => n,
            None => match tokio::time::timeout(timeout, cache::number_of_hash(up, hash)).await {
                Ok(Some(n)) => n,
                _ => return,
            },
        };
        if cache.finality.known().is_none_or(|f| number > f) {
            learning.learnt(cache::HashState::Number(number));
            drop(learning);
            return learn_finality(&state, number);
        }
        // A check that fails leaves the hash unknown for a moment (then
        // asked about from the start).
        if let Ok(Some(canonical)) =
            tokio::time::timeout(timeout, cache::hash_of_number(up, number)).await
        {
            learning.learnt(if canonical == hash {
                cache::HashState::Final
            } else {
                cache::HashState::Replaced
            });
        }
    });
}

/// A catalogued method reading state at its block, with `--archive`:
/// answered from the cache when kept there, else forwarded to the archive
/// nodes or the full ones by its block ([`crate::archive`]), and kept
/// once final as [`forward_cached`] keeps it.
#[allow(clippy::manual_async_fn, reason = "an `async fn` keeps the call twice")]
fn forward_state(
    call: AsyncCall<Gateway>,
    method: &'static Method,
) -> impl Future<Output = Forwarded> + Send {
    async move {
        let running = call.state.calls.enter();
        // Boxed: the head's ask and the retry make a large future, kept off
        // the dispatcher's box for every call.
        let outcome = match look_up(&call, method) {
            Lookup::Kept(answer) => Ok(answer),
            Lookup::Keep(cache, keep, key) => {
                let routed = Box::pin(route_state(&call, method));
                Box::pin(forward_and_keep(&call, method, cache, keep, key, routed)).await
            }
            Lookup::Pass => Box::pin(route_state(&call, method)).await.0,
        };
        running.finish();
        Forwarded(outcome)
    }
}

/// Sends a state reader's call where its block is kept: the outcome, and
/// whether the first upstream of the list that served it answered.
async fn route_state(
    call: &AsyncCall<Gateway>,
    method: &Method,
) -> (Result<Answer, RpcError>, bool) {
    let up = &call.state.up;
    let Some(archive) = &call.state.archive else {
        return up
            .forward_from(method.name, params(call), call.deadline())
            .await;
    };
    if archive.route(up, method, call.params.as_ref()).await == Route::Archive {
        archive.count_routed();
        return archive
            .forward(method.name, params(call), call.deadline())
            .await;
    }
    let (outcome, first) = up
        .forward_from(method.name, params(call), call.deadline())
        .await;
    match &outcome {
        // Once: the archive's answer, whatever it is, is the call's.
        Err(e) if archive::missing_state(e) => {
            archive.count_retried();
            archive
                .forward(method.name, params(call), call.deadline())
                .await
        }
        _ => (outcome, first),
    }
}

fn fallback(call: AsyncCall<Gateway>) -> impl Future<Output = Forwarded> + Send {
    // Either the answer or `forward`'s future, not both in one.
    let method = call.method();
    let refused = match config::deny_rule(&call.state.deny, method) {
        Some(rule) => errors::denied(method, rule),
        None if method.ends_with("_subscribe") || method.ends_with("_unsubscribe") => {
            errors::unrelayed_subscription(method)
        }
        None => return Either::Right(forward(call)),
    };
    Either::Left(std::future::ready(Forwarded(Err(refused))))
}

/// No params, or an empty array (`[[]]`, brackets and spaces only too,
/// was once taken for none).
fn no_params(p: Option<&OwnedParams>) -> bool {
    p.is_none_or(|p| {
        let inner = p.as_bytes().trim_ascii();
        inner.len() >= 2
            && inner[0] == b'['
            && inner[inner.len() - 1] == b']'
            && inner[1..inner.len() - 1].trim_ascii().is_empty()
    })
}

/// Answers from `slot` once the first upstream answered (only calls
/// without params: anything else is the upstream's to judge), unless calls
/// go to a fallback now. A fallback's answer is passed on, not kept: as for
/// the response cache, nothing checks that a fallback serves the same
/// chain, and this answer is the one clients learn a change of chain by
/// (a kept one told them the first upstream's chain while every call went
/// to a fallback on another).
#[allow(clippy::manual_async_fn, reason = "an `async fn` keeps the call twice")]
fn cached(
    call: AsyncCall<Gateway>,
    slot: fn(&Gateway) -> &OnceLock<Answer>,
) -> impl Future<Output = Forwarded> + Send {
    async move {
        let plain = no_params(call.params.as_ref());
        if plain
            && let Some(answer) = slot(&call.state).get()
            && !call.state.up.a_fallback_serves()
        {
            return Forwarded(Ok(answer.clone()));
        }
        let (outcome, from_first) = forward_counted_from(&call).await;
        // Kept only as a string (`"0x1"`, `"1"`): a `null` (a node that
        // does not know its chain yet) or anything else is passed on, not
        // served for the life of the process.
        if plain
            && from_first
            && let Ok(answer) = &outcome
            && answer.0.first() == Some(&b'"')
        {
            let _ = slot(&call.state).set(answer.clone());
        }
        Forwarded(outcome)
    }
}

fn chain_id(call: AsyncCall<Gateway>) -> impl Future<Output = Forwarded> + Send {
    cached(call, |g| &g.chain_id)
}

fn net_version(call: AsyncCall<Gateway>) -> impl Future<Output = Forwarded> + Send {
    cached(call, |g| &g.net_version)
}

/// `eth_subscribe`: subscribes upstream over WebSocket and relays the
/// notifications to this client under an id of the gateway's.
async fn subscribe(call: AsyncCall<Gateway>) -> Result<SubscriptionId, RpcError> {
    call.state.calls.track(subscribe_inner(&call)).await
}

async fn subscribe_inner(call: &AsyncCall<Gateway>) -> Result<SubscriptionId, RpcError> {
    let subs = Subscriptions::of(&call.ctx)?;
    let up = &call.state.up;
    let ws = up.ws.as_ref().ok_or_else(errors::no_upstream)?;
    let (down, sink) = subs.subscribe()?;
    let id = up.next_id();
    let body = request_body(id, "eth_subscribe", params(call));
    let outcome = match ws.call(id, body, Some(sink)).await {
        Ok(reply) => up.read(reply, id, &ws.name),
        Err(e) => Err(e),
    };
    match outcome {
        Ok(answer) if answer.0.first() == Some(&b'"') => Ok(down),
        Ok(_) => {
            subs.unsubscribe_id(down);
            Err(errors::malformed(
                &ws.name,
                "eth_subscribe answered with a non-string id",
            ))
        }
        Err(e) => {
            subs.unsubscribe_id(down);
            Err(e)
        }
    }
}

/// `eth_unsubscribe`: stops the relay and unsubscribes upstream; `true`
/// once the relay ended (`false` for an id this client does not hold).
async fn unsubscribe(call: AsyncCall<Gateway>) -> Forwarded {
    Forwarded(call.state.calls.track(unsubscribe_inner(&call)).await)
}

async fn unsubscribe_inner(call: &AsyncCall<Gateway>) -> Result<Answer, RpcError> {
    const FALSE: Answer = Answer(Bytes::from_static(b"false"));
    let subs = Subscriptions::of(&call.ctx)?;
    let (text,): (String,) = call.decode()?;
    let up = &call.state.up;
    let Some(down) = SubscriptionId::parse(&text) else {
        return Ok(FALSE);
    };
    let conn = match up.ws.as_ref() {
        Some(ws) => ws.current(),
        None => None,
    };
    let ended = conn
        .as_ref()
        .map(|c| c.end_relay(down, || subs.unsubscribe_id(down)));
    let (Some(conn), Some(EndRelay::Ended(upstream_id))) = (conn, &ended) else {
        return Ok(match ended {
            // Not this client's subscription: left as it was.
            Some(EndRelay::NotOwned) => FALSE,
            _ if subs.unsubscribe_id(down) => Answer(Bytes::from_static(b"true")),
            _ => FALSE,
        });
    };
    // Not waited for: the client's subscription is gone whatever the
    // upstream says. Waited for, an upstream that stopped answering (or a
    // connection lost meanwhile) gave the client -32002 or -32603 for a
    // subscription that had ended, and `false` on its retry.
    conn.unsubscribe_upstream(upstream_id);
    Ok(Answer(Bytes::from_static(b"true")))
}

/// The forwarding dispatcher, reporting its calls to `observer`.
pub fn dispatcher(
    config: &Config,
    observer: Option<Arc<dyn Observer>>,
) -> Result<Dispatcher<Gateway, WithAsync>, Box<dyn std::error::Error>> {
    let up = Upstreams::new(config)?;
    let gateway = Gateway {
        up,
        cache: (config.cache_bytes > 0)
            .then(|| Cache::new(config.cache_bytes, config.finalized_every)),
        archive: Archive::new(config)?,
        calls: InFlight::default(),
        deny: config.deny.clone(),
        chain_id: OnceLock::new(),
        net_version: OnceLock::new(),
    };
    let archives = !config.archives.is_empty();
    let mut b = Dispatcher::builder(gateway)
        .parser(config.parser())
        .max_response_len(config.max_response)
        // geth's codes for a reply past the limit and a call past its
        // deadline.
        .too_large_code(rpcwire::eth::codes::RESPONSE_TOO_LARGE)
        .timeout_code(rpcwire::eth::codes::REQUEST_TIMEOUT)
        // The per-request timeout: -32002, `data.timeout_ms`; the
        // upstream that let it pass rests.
        .timeout(Some(config.timeout))
        .max_in_flight(1024)
        .async_fallback(fallback);
    let denies = |name: &str| config::deny_rule(&config.deny, name);
    // Answered here or relayed, unless a rule denies them (then refused in
    // the loop below, as any method the catalogue names).
    if denies("eth_chainId").is_none() {
        b = b.async_method("eth_chainId", chain_id);
    }
    if denies("net_version").is_none() {
        b = b.async_method("net_version", net_version);
    }
    if denies("eth_subscribe").is_none() {
        b = b.async_method("eth_subscribe", subscribe);
    }
    if denies("eth_unsubscribe").is_none() {
        b = b.async_method("eth_unsubscribe", unsubscribe);
    }
    for m in catalogue::METHODS {
        let denied = denies(m.name);
        if denied.is_none()
            && matches!(
                m.name,
                "eth_chainId" | "net_version" | "eth_subscribe" | "eth_unsubscribe"
            )
        {
            continue;
        }
        if let Some(rule) = denied {
            let rule = rule.to_owned();
            b = b.method(m.name, move |c: Call<'_, Gateway>| {
                Err::<(), _>(errors::denied(c.method(), &rule))
            });
        } else if m.access == catalogue::Access::Subscription {
            b = b.method(m.name, |c: Call<'_, Gateway>| {
                Err::<(), _>(errors::unrelayed_subscription(c.method()))
            });
        } else if archives && m.reads_state() {
            b = b.async_method(m.name, move |call| forward_state(call, m));
        } else if m.cache != catalogue::Cache::Never && config.cache_bytes > 0 {
            b = b.async_method(m.name, move |call| forward_cached(call, m));
        } else {
            b = b.async_method(m.name, forward);
        }
    }
    if let Some(observer) = observer {
        b = b.observer(observer);
    }
    Ok(b.build()?)
}
