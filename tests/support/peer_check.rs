//! Drives one two-way connection by a script of operations (the `peer` fuzz
//! target's input; the corpus replay runs the same) and checks the peer
//! machinery all along.
//!
//! The connection: a [`Connection`] whose [`Peer`] writes to an in-memory
//! outbound queue, fed messages by hand through `Connection::start` and
//! `Connection::poll_replies` with an async dispatcher (the first byte picks
//! plain JSON-RPC, LSP's `$/cancelRequest` or MCP's
//! `notifications/cancelled`), on a current-thread tokio runtime whose
//! clock is paused, so that time passes only when the script says.
//!
//! The operations: this side sends requests (awaited `Peer::request`
//! futures with timeouts, `Peer::request_with` callbacks with deadlines) and
//! notifications; the other side sends responses (to ids sent, never sent,
//! answered already, malformed), single requests (sync, async, held until
//! cancelled or timed out, one that asks this side's peer something back),
//! mixed batches, cancellations and garbage; time passes; a request future
//! is dropped, a callback request cancelled; the outbound queue refuses;
//! the peer closes. At the end the peer closes and the connection drains.
//!
//! Checked (a violation panics): every message either side of rpcwire
//! writes to the other is valid JSON-RPC 2.0; a response is never answered
//! and each request with an id is answered exactly once (or not at all,
//! where a cancellation says so); a response is matched exactly when its
//! request is pending, and `unmatched_responses` counts the rest; every
//! request future and callback completes exactly once, with the answer
//! that matched it, or times out when its deadline passed, and none waits
//! after the close; a cancellation notice goes out once per request given
//! up on, where the protocol has one, and never after its answer; after
//! the close nothing is pending and nothing is in flight.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rpcwire::dispatch::{AsyncCall, CancelledReply, ReplyBuf, WithAsync};
use rpcwire::peer::{Outbound, OwnedResponse, Peer, PeerError, SendError};
use rpcwire::{Call, Connection, Context, Dispatcher, RpcError};
use serde_json::{Value, json};

/// The async handlers' timeout.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Operations read from one input, at most.
const MAX_OPS: usize = 64;
/// Polls in a row that [`Run::settle`] allows before it calls the
/// connection busy (each poll starts at least one queued call, or finishes
/// one).
const SETTLE_POLLS: usize = 2000;

/// Set by the waker the connection and the request futures are polled
/// with.
#[derive(Default)]
struct Woken(AtomicBool);

impl std::task::Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// What one process builds once: the runtime and a dispatcher per protocol.
pub struct Harness {
    rt: tokio::runtime::Runtime,
    dispatchers: [Dispatcher<(), WithAsync>; 3],
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap(),
            dispatchers: [
                dispatcher(Mode::Plain),
                dispatcher(Mode::Lsp),
                dispatcher(Mode::Mcp),
            ],
        }
    }
}

/// Runs the script `data`; panics on any violation.
pub fn check(h: &Harness, data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let mode = [Mode::Plain, Mode::Lsp, Mode::Mcp][usize::from(first % 3)];
    let d = &h.dispatchers[usize::from(first % 3)];
    h.rt.block_on(Run::new(d, mode).script(rest));
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Plain,
    Lsp,
    Mcp,
}

impl Mode {
    /// The cancellation notification's method and id member.
    fn cancel(self) -> Option<(&'static str, &'static str)> {
        match self {
            Mode::Plain => None,
            Mode::Lsp => Some(LSP_CANCEL),
            Mode::Mcp => Some(MCP_CANCEL),
        }
    }
}

const LSP_CANCEL: (&str, &str) = ("$/cancelRequest", "id");
const MCP_CANCEL: (&str, &str) = ("notifications/cancelled", "requestId");

/// `ping` (sync), `slow` (sleeps `ms`), `hold` (never finishes by itself),
/// `ask` (asks this side's peer `q` with `{"for": tag}`, waiting `ms`, and
/// answers what came back).
fn dispatcher(mode: Mode) -> Dispatcher<(), WithAsync> {
    let b = Dispatcher::builder(())
        .timeout(Some(CALL_TIMEOUT))
        .max_in_flight(3)
        .method("ping", |c: Call<'_, ()>| c.reply.str("pong"))
        .async_method("slow", |c: AsyncCall<()>| async move {
            let ms = params(&c)["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>("slept")
        })
        .async_method("hold", |_c: AsyncCall<()>| {
            std::future::pending::<Result<(), RpcError>>()
        })
        .async_method("ask", |c: AsyncCall<()>| async move {
            let p = params(&c);
            let peer = c.ctx.peer().expect("a two-way connection").clone();
            let wait = Duration::from_millis(p["ms"].as_u64().unwrap_or(0));
            let asked = peer
                .request("q", Some(&json!({"for": p["tag"]})), wait)
                .await;
            Ok::<_, RpcError>(match asked {
                Ok(r) => json!({"answered": outcome(&r)}),
                Err(e) => json!({"no_answer": format!("{e:?}")}),
            })
        });
    match mode {
        Mode::Plain => b,
        Mode::Lsp => b.cancel_notification(LSP_CANCEL.0, LSP_CANCEL.1, CancelledReply::Error),
        Mode::Mcp => b
            .cancel_notification(MCP_CANCEL.0, MCP_CANCEL.1, CancelledReply::Nothing)
            .cancel_reason("reason"),
    }
    .build()
    .unwrap()
}

/// Prints the conversation when `PEER_CHECK_TRACE` is set (to read what a
/// failing input does).
fn trace(what: &str, text: &[u8]) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("PEER_CHECK_TRACE").is_some()) {
        eprintln!("{what} {}", String::from_utf8_lossy(text));
    }
}

fn params(c: &AsyncCall<()>) -> Value {
    c.params
        .as_ref()
        .and_then(|p| serde_json::from_slice(p.as_bytes()).ok())
        .unwrap_or(Value::Null)
}

/// A response as JSON, comparable with what the other side sent.
fn outcome(r: &OwnedResponse) -> Value {
    match r.result() {
        Ok(v) => json!({"result": serde_json::from_slice::<Value>(v).expect("a result is JSON")}),
        Err(e) => json!({"error": {
            "code": e.code,
            "message": e.message,
            "data": e.data.as_ref().map(|d| serde_json::from_slice::<Value>(d).expect("data is JSON")),
        }}),
    }
}

/// The outbound queue: keeps every message offered, queued or refused.
#[derive(Default)]
struct Wire {
    log: Mutex<Vec<(Bytes, bool)>>,
    refuse: Mutex<Option<SendError>>,
}

impl Outbound for Wire {
    fn send(&self, message: Bytes) -> Result<(), SendError> {
        let refuse = *self.refuse.lock().unwrap();
        self.log.lock().unwrap().push((message, refuse.is_none()));
        refuse.map_or(Ok(()), Err)
    }
}

/// The connection's replies, one by one (`end_reply` marks their ends).
#[derive(Default)]
struct Replies {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl ReplyBuf for Replies {
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }
    fn truncate(&mut self, len: usize) {
        assert!(
            self.ends.last().is_none_or(|&e| e <= len),
            "a reply already ended was cut"
        );
        self.buf.truncate(len);
    }
    fn end_reply(&mut self) {
        assert!(
            self.ends.last() != Some(&self.buf.len()),
            "end_reply after no reply"
        );
        self.ends.push(self.buf.len());
    }
}

impl Replies {
    fn take(&mut self) -> Vec<Vec<u8>> {
        assert_eq!(
            self.ends.last().copied().unwrap_or(0),
            self.buf.len(),
            "a reply not followed by end_reply: {}",
            String::from_utf8_lossy(&self.buf)
        );
        let mut start = 0;
        let out = self
            .ends
            .drain(..)
            .map(|end| {
                let r = self.buf[start..end].to_vec();
                start = end;
                r
            })
            .collect();
        self.buf.clear();
        out
    }
}

/// Who sent an outbound request.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Owner {
    /// An awaited `Peer::request`, by index.
    Future(usize),
    /// `Peer::request_with`, by index.
    Callback(usize),
    /// The `ask` handler of the incoming call with this tag.
    Handler(u64),
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum State {
    /// In the peer's table.
    Pending,
    /// In the peer's table, or given up on without a word (a handler's
    /// request on a connection whose protocol has no cancellation).
    Maybe,
    /// Matched by a response.
    Answered,
    /// Given up on, refused by the queue, or answered while `Maybe`.
    Gone,
}

struct OutReq {
    owner: Owner,
    state: State,
    noticed: bool,
    /// Given up on (closed) before the protocol was known: no notice owed.
    quiet: bool,
    /// The outcomes of responses sent while it could match.
    answers: Vec<Value>,
    /// An invalid answer came while it could match: it ended with
    /// `PeerError::InvalidResponse` (no notice owed: the other side
    /// answered).
    invalid: bool,
}

/// An incoming request with an id.
struct InReq {
    method: &'static str,
    tag: u64,
    /// Alone in its message (not a batch entry).
    single: bool,
    /// Cancelled where a single request then gets no reply.
    may_skip: bool,
    replies: u32,
}

/// A batch's expected reply: its requests' ids, and how many entries are
/// invalid (answered with id null).
struct BatchReply {
    ids: Vec<String>,
    invalid: usize,
    answered: bool,
}

type Pinned = Pin<Box<dyn Future<Output = Result<OwnedResponse, PeerError>>>>;
type CallbackLog = Arc<Mutex<Vec<(u64, Result<Value, PeerError>)>>>;

struct Run<'d> {
    d: &'d Dispatcher<(), WithAsync>,
    mode: Mode,
    /// A message reached the dispatcher: the peer knows the protocol's
    /// cancellation.
    learned: bool,
    conn: Connection,
    peer: Peer,
    wire: Arc<Wire>,
    wire_seen: usize,
    replies: Replies,
    woken: Arc<Woken>,
    futures: Vec<Option<Pinned>>,
    /// When each future's timeout passes (virtual time).
    future_due: Vec<Duration>,
    future_done: Vec<(usize, Result<OwnedResponse, PeerError>)>,
    callback_log: CallbackLog,
    callback_seen: usize,
    /// Per callback request: its id and deadline, when it was sent.
    callbacks: Vec<Option<(u64, Option<Duration>)>>,
    callback_calls: HashMap<u64, u32>,
    outs: BTreeMap<u64, OutReq>,
    ins: BTreeMap<String, InReq>,
    batches: Vec<BatchReply>,
    garbage: usize,
    /// Invalid messages that may be answered with id null.
    null_budget: usize,
    null_replies: usize,
    counter: u64,
    base: Instant,
    elapsed: Duration,
    closed: bool,
}

/// The fuzz input, read a byte at a time (zeros once it runs out).
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn next(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn byte(&mut self) -> u8 {
        self.next().unwrap_or(0)
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

impl<'d> Run<'d> {
    fn new(d: &'d Dispatcher<(), WithAsync>, mode: Mode) -> Run<'d> {
        let wire = Arc::new(Wire::default());
        let ctx = Context::builder().outbound(wire.clone()).build();
        let peer = ctx.peer().unwrap().clone();
        Run {
            d,
            mode,
            learned: false,
            conn: Connection::with_context(ctx),
            peer,
            wire,
            wire_seen: 0,
            replies: Replies::default(),
            woken: Arc::default(),
            futures: Vec::new(),
            future_due: Vec::new(),
            future_done: Vec::new(),
            callback_log: CallbackLog::default(),
            callback_seen: 0,
            callbacks: Vec::new(),
            callback_calls: HashMap::new(),
            outs: BTreeMap::new(),
            ins: BTreeMap::new(),
            batches: Vec::new(),
            garbage: 0,
            null_budget: 0,
            null_replies: 0,
            counter: 0,
            base: Instant::now(),
            elapsed: Duration::ZERO,
            closed: false,
        }
    }

    async fn script(mut self, data: &[u8]) {
        let mut s = Script(data);
        let mut ops = 0;
        while let Some(op) = s.next() {
            ops += 1;
            if ops > MAX_OPS {
                break;
            }
            trace("op", format!("{}", op % 16).as_bytes());
            match op % 16 {
                0 => self.send_future(s.byte()).await,
                1 => self.send_callback(s.byte()),
                2 => {
                    let n = self.fresh();
                    // Queued or refused: either way nothing waits.
                    let _ = self.peer.notify("note", &json!({"n": n}));
                }
                3 => {
                    let (target, kind, weird) = (s.byte(), s.byte(), s.byte());
                    self.respond(target, kind, weird);
                }
                4 => self.batch(&mut s),
                5 => {
                    let (m, arg) = (s.byte(), s.byte());
                    self.request(m, arg, true);
                }
                6 => {
                    let (m, arg) = (s.byte(), s.byte());
                    self.request(m, arg, false);
                }
                7 => {
                    let (pick, shape) = (s.byte(), s.byte());
                    self.cancel_incoming(pick, shape);
                }
                8 => {
                    let n = usize::from(s.byte() % 32);
                    let mut text = b"#".to_vec();
                    text.extend_from_slice(s.take(n));
                    self.garbage += 1;
                    self.feed(text, 0, 0);
                }
                9 => {
                    let ms = u64::from(s.byte()) * 20;
                    self.advance(Duration::from_millis(ms)).await;
                }
                10 => self.abandon(s.byte()),
                11 => self.cancel_callback(s.byte()),
                12 => {
                    *self.wire.refuse.lock().unwrap() = match s.byte() % 3 {
                        0 => None,
                        1 => Some(SendError::Full),
                        _ => Some(SendError::Closed),
                    };
                }
                13 => self.close(),
                14 => {
                    if let Some(id) = self.pick_in(s.byte())
                        && self.conn.cancel(id.as_bytes())
                    {
                        self.may_skip(&id);
                    }
                }
                _ => self.settle().await,
            }
            self.absorb();
        }
        self.finish().await;
    }

    fn fresh(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// Whether a request given up on is announced to the other side.
    fn notices(&self) -> bool {
        self.learned && self.mode != Mode::Plain
    }

    async fn send_future(&mut self, arg: u8) {
        let idx = self.futures.len();
        let wait = Duration::from_millis(u64::from(arg) * 25);
        let peer = self.peer.clone();
        self.futures.push(Some(Box::pin(async move {
            peer.request("q", Some(&json!({"f": idx})), wait).await
        })));
        self.future_due.push(self.elapsed + wait);
        // Its first poll sends it.
        let waker = std::task::Waker::from(self.woken.clone());
        self.poll_future(idx, &mut std::task::Context::from_waker(&waker));
    }

    fn send_callback(&mut self, arg: u8) {
        let idx = self.callbacks.len();
        let due = (arg > 0).then(|| self.elapsed + Duration::from_millis(u64::from(arg) * 25));
        let log = self.callback_log.clone();
        let slot = Arc::new(Mutex::new(None::<u64>));
        let s2 = slot.clone();
        let sent = self.peer.request_with(
            "q",
            Some(&json!({"c": idx})),
            due.map(|d| self.base + d),
            move |r| {
                let id = s2.lock().unwrap().expect("called during request_with");
                log.lock().unwrap().push((id, r.map(|o| outcome(&o))));
            },
        );
        match sent {
            Ok(id) => {
                *slot.lock().unwrap() = Some(id);
                self.callbacks.push(Some((id, due)));
            }
            Err(e) => {
                assert!(
                    matches!(e, PeerError::Send(_)) || (e == PeerError::Closed && self.closed),
                    "request_with failed: {e:?}"
                );
                self.callbacks.push(None);
            }
        }
    }

    /// An outbound id to answer: mostly one sent, sometimes one never sent.
    fn pick_out(&self, arg: u8) -> u64 {
        if arg < 224 && !self.outs.is_empty() {
            return *self
                .outs
                .keys()
                .nth(usize::from(arg) % self.outs.len())
                .unwrap();
        }
        match arg % 4 {
            0 => 0,
            1 => 4242,
            2 => u64::MAX,
            _ => self.outs.keys().next_back().map_or(1, |k| k + 1),
        }
    }

    fn pick_in(&self, arg: u8) -> Option<String> {
        if self.ins.is_empty() {
            return None;
        }
        self.ins
            .keys()
            .nth(usize::from(arg) % self.ins.len())
            .cloned()
    }

    /// A response to `id` and the outcome it should deliver (`None`: not a
    /// valid response, matches nothing).
    fn response(&mut self, id: &str, kind: u8) -> (String, Option<Value>) {
        let n = self.fresh();
        match kind % 5 {
            0 => (
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"v":{n}}}}}"#),
                Some(json!({"result": {"v": n}})),
            ),
            1 => (
                format!(
                    r#"{{"jsonrpc":"2.0", "id" : {id} ,"error":{{"code":-{n},"message":"n\u00e9 {n}"}}}}"#
                ),
                Some(
                    json!({"error": {"code": -(n as i64), "message": format!("né {n}"), "data": null}}),
                ),
            ),
            2 => (
                format!(
                    r#"{{"error":{{"data":[{n},"\""],"message":"x","code":{n}}},"id":{id},"jsonrpc":"2.0"}}"#
                ),
                Some(json!({"error": {"code": n, "message": "x", "data": [n, "\""]}})),
            ),
            3 => (
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":1,"error":{{"code":1,"message":"both"}}}}"#
                ),
                None,
            ),
            _ => (
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":null}}"#),
                Some(json!({"result": null})),
            ),
        }
    }

    /// [`response`](Self::response) to `id`, but for some of the invalid
    /// kind, when `id` is one this side sent, a bare answer instead (JS's
    /// `JSON.stringify` of a result left `undefined`: `"jsonrpc"` and the
    /// id alone), as invalid: the dispatcher takes it for a broken answer,
    /// never a request to answer.
    fn bare_or_response(&mut self, id: u64, kind: u8) -> (String, Option<Value>) {
        let (msg, answer) = self.response(&id.to_string(), kind);
        if kind % 5 == 3 && kind % 2 == 1 && self.outs.contains_key(&id) {
            return (format!(r#"{{"jsonrpc":"2.0","id":{id}}}"#), answer);
        }
        (msg, answer)
    }

    /// Models delivering `answer` to request `id`: `lo` counts the
    /// responses sure to match nothing, `hi` those that may not.
    fn deliver(&mut self, id: u64, answer: Option<Value>, lo: &mut u64, hi: &mut u64) {
        let out = self.outs.get_mut(&id);
        match (answer, out) {
            (Some(a), Some(o)) if o.state == State::Pending => {
                o.state = State::Answered;
                o.answers.push(a);
            }
            (Some(a), Some(o)) if o.state == State::Maybe => {
                o.state = State::Gone;
                o.answers.push(a);
                *hi += 1;
            }
            // An invalid answer is counted as matching nothing, and ends
            // the request it names if that is still in the table.
            (None, Some(o)) if matches!(o.state, State::Pending | State::Maybe) => {
                o.state = State::Gone;
                o.invalid = true;
                *lo += 1;
                *hi += 1;
            }
            _ => {
                *lo += 1;
                *hi += 1;
            }
        }
    }

    fn respond(&mut self, target: u8, kind: u8, weird: u8) {
        if kind >= 240 {
            // Ids that are not this side's integers: never matched.
            let (text, valid) = [
                (r#""1""#, true),
                ("1.0", true),
                ("1e0", true),
                ("-1", true),
                ("null", true),
                ("18446744073709551616", true),
                (r#""x\u0031""#, true),
                ("[1]", false),
                (r#"{"a":1}"#, false),
                ("true", false),
            ][usize::from(weird) % 10];
            let (msg, _) = self.response(text, kind);
            if valid {
                self.feed(msg.into_bytes(), 1, 1);
            } else {
                self.null_budget += 1;
                self.feed(msg.into_bytes(), 0, 1);
            }
            return;
        }
        let id = self.pick_out(target);
        let (msg, answer) = self.bare_or_response(id, kind);
        let (mut lo, mut hi) = (0, 0);
        self.deliver(id, answer, &mut lo, &mut hi);
        self.feed(msg.into_bytes(), lo, hi);
    }

    /// A request (or notification) of the other side's, as JSON text;
    /// registers it when it has an id.
    fn incoming(
        &mut self,
        m: u8,
        arg: u8,
        with_id: bool,
        single: bool,
    ) -> (String, Option<String>) {
        let (method, params) = match m % 6 {
            0 => ("ping", None),
            1 => ("slow", Some(json!({"ms": u64::from(arg) * 20}))),
            2 => ("hold", None),
            3 | 4 => ("ask", None),
            _ => ("nope", None),
        };
        let tag = self.fresh();
        let params = if method == "ask" {
            Some(json!({"tag": tag, "ms": u64::from(arg) * 25}))
        } else {
            params
        };
        let mut msg = json!({"jsonrpc": "2.0", "method": method});
        if let Some(p) = params {
            msg["params"] = p;
        }
        let id = with_id.then(|| {
            let id = if tag.is_multiple_of(2) {
                json!(100_000 + tag)
            } else {
                json!(format!("r{tag}"))
            };
            msg["id"] = id.clone();
            let key = id.to_string();
            self.ins.insert(
                key.clone(),
                InReq {
                    method,
                    tag,
                    single,
                    may_skip: false,
                    replies: 0,
                },
            );
            key
        });
        (msg.to_string(), id)
    }

    fn request(&mut self, m: u8, arg: u8, with_id: bool) {
        let (msg, _) = self.incoming(m, arg, with_id, true);
        self.feed(msg.into_bytes(), 0, 0);
    }

    fn batch(&mut self, s: &mut Script<'_>) {
        let n = 1 + s.byte() % 6;
        let mut entries = Vec::new();
        let mut expect = BatchReply {
            ids: Vec::new(),
            invalid: 0,
            answered: false,
        };
        let (mut lo, mut hi) = (0, 0);
        let mut last_response: Option<(u64, String, Option<Value>)> = None;
        // An `ask` earlier in the batch (a request or a notification) is
        // polled as the batch starts, in its turn, and sends its `q` with
        // the next id before the entries after it are read: a response
        // there to an id not sent yet could match it. Such responses get
        // an id never allocated instead, so that what they match stays
        // known.
        let mut asked = false;
        for _ in 0..n {
            let (kind, a, b) = (s.byte(), s.byte(), s.byte());
            match kind % 6 {
                5 if a >= 128 => {
                    // Acted on only when alone: here the call goes on.
                    let (msg, _) = self.cancel_notification(a, b);
                    entries.push(msg);
                }
                0 | 5 => {
                    let mut id = self.pick_out(a);
                    if asked && !self.outs.contains_key(&id) {
                        id = u64::MAX;
                    }
                    let (msg, answer) = self.bare_or_response(id, b);
                    self.deliver(id, answer.clone(), &mut lo, &mut hi);
                    entries.push(msg.clone());
                    last_response = Some((id, msg, answer));
                }
                1 => {
                    let (msg, id) = self.incoming(a, b, true, false);
                    asked |= msg.contains(r#""method":"ask""#);
                    expect.ids.extend(id);
                    entries.push(msg);
                }
                2 => {
                    let (msg, _) = self.incoming(a, b, false, false);
                    asked |= msg.contains(r#""method":"ask""#);
                    entries.push(msg);
                }
                3 => {
                    expect.invalid += 1;
                    entries.push(["1", "{}", r#""x""#, "[]"][usize::from(a % 4)].to_string());
                }
                _ => match last_response.clone() {
                    // Its id was not sent when it was first picked, but
                    // an ask since may have sent it: a fresh one instead.
                    Some((id, _, _)) if asked && !self.outs.contains_key(&id) => {
                        let (msg, answer) = self.response(&u64::MAX.to_string(), b);
                        self.deliver(u64::MAX, answer.clone(), &mut lo, &mut hi);
                        entries.push(msg.clone());
                        last_response = Some((u64::MAX, msg, answer));
                    }
                    Some((id, msg, answer)) => {
                        self.deliver(id, answer, &mut lo, &mut hi);
                        entries.push(msg);
                    }
                    None => {
                        let (msg, _) = self.response("4242", b);
                        lo += 1;
                        hi += 1;
                        entries.push(msg);
                    }
                },
            }
        }
        if !expect.ids.is_empty() || expect.invalid > 0 {
            self.batches.push(expect);
        }
        self.feed(format!("[{}]", entries.join(",")).into_bytes(), lo, hi);
    }

    /// A cancellation of an incoming call (mostly one sent, in the
    /// protocol's shape or another's), and the call's id.
    fn cancel_notification(&self, pick: u8, shape: u8) -> (String, String) {
        let id = match self.pick_in(pick) {
            Some(id) if pick % 16 != 15 => id,
            _ => "987654".to_string(),
        };
        let (method, member) = match (shape % 4, self.mode.cancel()) {
            (0 | 1, Some(own)) => own,
            (2, _) | (0 | 1, None) => LSP_CANCEL,
            _ => MCP_CANCEL,
        };
        let msg = format!(
            r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"{member}":{id},"reason":"fuzz"}}}}"#
        );
        (msg, id)
    }

    fn cancel_incoming(&mut self, pick: u8, shape: u8) {
        let (msg, id) = self.cancel_notification(pick, shape);
        if self.mode == Mode::Mcp && msg.contains(MCP_CANCEL.0) {
            self.may_skip(&id);
        }
        self.feed(msg.into_bytes(), 0, 0);
    }

    /// The call `id` may have been cancelled in a way that leaves a single
    /// request unanswered (MCP's notification, `Connection::cancel`).
    fn may_skip(&mut self, id: &str) {
        if let Some(r) = self.ins.get_mut(id) {
            r.may_skip |= r.single;
        }
    }

    /// Feeds one message; `lo..=hi` responses in it match nothing.
    fn feed(&mut self, text: Vec<u8>, lo: u64, hi: u64) {
        let before = self.conn.unmatched_responses();
        trace("<", &text);
        let input = Bytes::from(text);
        self.conn.start(self.d, &input, &mut self.replies);
        self.learned = true;
        let unmatched = self.conn.unmatched_responses() - before;
        assert!(
            (lo..=hi).contains(&unmatched),
            "{unmatched} responses unmatched, {lo}..={hi} expected, in {}",
            String::from_utf8_lossy(&input)
        );
    }

    async fn advance(&mut self, by: Duration) {
        tokio::time::advance(by).await;
        self.elapsed += by;
        self.peer.expire(self.base + self.elapsed);
        self.settle().await;
        self.absorb();
        for c in self.callbacks.iter().flatten() {
            if let (id, Some(due)) = c {
                assert!(
                    *due > self.elapsed || self.callback_calls.contains_key(id),
                    "request {id} still waits past its deadline"
                );
            }
        }
        for (i, f) in self.futures.iter().enumerate() {
            assert!(
                f.is_none() || self.future_due[i] > self.elapsed,
                "request future {i} still waits past its timeout"
            );
        }
    }

    fn abandon(&mut self, arg: u8) {
        if self.futures.is_empty() {
            return;
        }
        let i = usize::from(arg) % self.futures.len();
        let Some(f) = self.futures[i].take() else {
            return;
        };
        drop(f);
        self.absorb_wire();
        let notices = self.notices();
        if let Some((&id, o)) = self
            .outs
            .iter_mut()
            .find(|(_, o)| o.owner == Owner::Future(i))
            && o.state == State::Pending
        {
            assert!(!notices, "request {id}, abandoned, was not announced");
            o.state = State::Gone;
        }
    }

    fn cancel_callback(&mut self, arg: u8) {
        if self.callbacks.is_empty() {
            return;
        }
        let Some((id, _)) = self.callbacks[usize::from(arg) % self.callbacks.len()] else {
            return;
        };
        let pending = self
            .outs
            .get(&id)
            .is_some_and(|o| o.state == State::Pending);
        assert_eq!(self.peer.cancel(id), pending, "cancel({id})");
    }

    fn close(&mut self) {
        self.peer.close();
        self.closed = true;
        self.absorb_wire();
        let notices = self.notices();
        for (id, o) in &mut self.outs {
            if matches!(o.state, State::Pending | State::Maybe) {
                assert!(
                    !(notices && o.state == State::Pending),
                    "request {id}, pending at the close, was not announced"
                );
                o.state = State::Gone;
                o.quiet = true;
            }
        }
    }

    fn poll_future(&mut self, i: usize, cx: &mut std::task::Context<'_>) {
        if let Some(f) = &mut self.futures[i]
            && let Poll::Ready(r) = f.as_mut().poll(cx)
        {
            self.future_done.push((i, r));
            self.futures[i] = None;
        }
    }

    /// Polls the connection and the request futures as an executor would:
    /// once, then again each time one of them woke the task (a timer fired,
    /// a call made progress), until none does.
    async fn settle(&mut self) {
        let waker = std::task::Waker::from(self.woken.clone());
        self.woken.0.store(true, Ordering::Release);
        for _ in 0..SETTLE_POLLS {
            // Lets the runtime fire the timers due.
            tokio::task::yield_now().await;
            if !self.woken.0.swap(false, Ordering::AcqRel) {
                return;
            }
            let cx = &mut std::task::Context::from_waker(&waker);
            while let Poll::Ready(n) = self.conn.poll_replies(self.d, cx, &mut self.replies) {
                assert!(n > 0, "poll_replies is Ready(0)");
            }
            for i in 0..self.futures.len() {
                self.poll_future(i, cx);
            }
        }
        panic!("still woken after {SETTLE_POLLS} polls");
    }

    /// Checks everything that happened since the last call.
    fn absorb(&mut self) {
        self.absorb_wire();
        let log: Vec<_> = self.callback_log.lock().unwrap()[self.callback_seen..].to_vec();
        self.callback_seen += log.len();
        for (id, r) in log {
            let calls = self.callback_calls.entry(id).or_default();
            *calls += 1;
            assert_eq!(*calls, 1, "request_with's callback for {id} ran twice");
            self.settled(id, r);
        }
        for (i, r) in std::mem::take(&mut self.future_done) {
            let id = self
                .outs
                .iter()
                .find(|(_, o)| o.owner == Owner::Future(i))
                .map(|(id, _)| *id);
            match id {
                Some(id) => self.settled(id, r.map(|o| outcome(&o))),
                None => assert!(
                    matches!(r, Err(PeerError::Send(_)) | Err(PeerError::Closed)),
                    "request future {i}, never sent, ended with {r:?}"
                ),
            }
        }
        for reply in self.replies.take() {
            self.check_reply(&reply);
        }
        let (sure, maybe) = self.outs.values().fold((0, 0), |(s, m), o| match o.state {
            State::Pending => (s + 1, m),
            State::Maybe => (s, m + 1),
            _ => (s, m),
        });
        let pending = self.peer.pending();
        assert!(
            (sure..=sure + maybe).contains(&pending),
            "{pending} requests pending, {sure}..={} expected",
            sure + maybe
        );
    }

    /// Request `id` of this side's finished with `r`.
    fn settled(&mut self, id: u64, r: Result<Value, PeerError>) {
        let notices = self.notices();
        let o = self
            .outs
            .get_mut(&id)
            .unwrap_or_else(|| panic!("an outcome for request {id}, never sent"));
        match r {
            Ok(v) => {
                assert_eq!(
                    o.state,
                    State::Answered,
                    "request {id} answered unexpectedly"
                );
                assert_eq!(o.answers, [v], "request {id} got another answer");
            }
            Err(PeerError::Send(_)) => {
                assert_eq!(o.state, State::Gone, "request {id} refused, yet pending");
            }
            Err(PeerError::InvalidResponse(_)) => {
                assert!(
                    o.invalid,
                    "request {id} ended by an invalid answer never sent"
                );
                o.state = State::Gone;
            }
            Err(e) => {
                assert_ne!(
                    o.state,
                    State::Answered,
                    "request {id}, answered, ended with {e:?}"
                );
                assert!(
                    !notices || o.noticed || o.quiet,
                    "request {id} given up on ({e:?}) without a notice"
                );
                o.state = State::Gone;
            }
        }
    }

    fn absorb_wire(&mut self) {
        let log: Vec<_> = self.wire.log.lock().unwrap()[self.wire_seen..].to_vec();
        self.wire_seen += log.len();
        for (msg, queued) in log {
            self.check_outbound(&msg, queued);
        }
    }

    /// A message this side's peer wrote.
    fn check_outbound(&mut self, msg: &[u8], queued: bool) {
        trace(if queued { "peer >" } else { "peer refused >" }, msg);
        let text = String::from_utf8_lossy(msg);
        let v: Value = serde_json::from_slice(msg)
            .unwrap_or_else(|e| panic!("the peer wrote invalid JSON ({e}): {text}"));
        let o = v
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {text}"));
        assert_eq!(o.get("jsonrpc"), Some(&json!("2.0")), "{text}");
        for k in o.keys() {
            assert!(
                matches!(k.as_str(), "jsonrpc" | "id" | "method" | "params"),
                "member {k} in {text}"
            );
        }
        let method = o
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no method: {text}"));
        let params = o.get("params").unwrap_or(&Value::Null);
        assert!(params.is_object() || params.is_array(), "params of {text}");
        if let Some(id) = o.get("id") {
            let id = id
                .as_u64()
                .unwrap_or_else(|| panic!("an id this side allocated is not an integer: {text}"));
            assert_eq!(method, "q", "{text}");
            assert!(!self.outs.contains_key(&id), "id {id} sent twice: {text}");
            let owner = if let Some(f) = params.get("f").and_then(Value::as_u64) {
                Owner::Future(f as usize)
            } else if let Some(c) = params.get("c").and_then(Value::as_u64) {
                Owner::Callback(c as usize)
            } else {
                Owner::Handler(params["for"].as_u64().unwrap_or_else(|| panic!("{text}")))
            };
            let state = if !queued {
                State::Gone
            } else if matches!(owner, Owner::Handler(_)) && !self.notices() {
                State::Maybe
            } else {
                State::Pending
            };
            self.outs.insert(
                id,
                OutReq {
                    owner,
                    state,
                    noticed: false,
                    quiet: false,
                    answers: Vec::new(),
                    invalid: false,
                },
            );
            return;
        }
        if method == "note" {
            return;
        }
        let (cancel, member) = self
            .mode
            .cancel()
            .unwrap_or_else(|| panic!("a notice where the protocol has none: {text}"));
        assert!(
            self.learned,
            "a notice before the protocol was known: {text}"
        );
        assert_eq!(method, cancel, "{text}");
        let p = params.as_object().unwrap();
        let id = p
            .get(member)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("the notice names no id: {text}"));
        let expected_members = if self.mode == Mode::Mcp { 2 } else { 1 };
        assert_eq!(p.len(), expected_members, "{text}");
        if self.mode == Mode::Mcp {
            assert!(p.get("reason").is_some_and(Value::is_string), "{text}");
        }
        let o = self
            .outs
            .get_mut(&id)
            .unwrap_or_else(|| panic!("a notice for a request never sent: {text}"));
        assert!(!o.noticed, "request {id} announced twice");
        assert!(
            matches!(o.state, State::Pending | State::Maybe),
            "request {id} announced while {:?}",
            o.state
        );
        o.noticed = true;
        o.state = State::Gone;
    }

    /// A reply the connection wrote to the other side.
    fn check_reply(&mut self, reply: &[u8]) {
        trace("reply >", reply);
        let text = String::from_utf8_lossy(reply).into_owned();
        let v: Value = serde_json::from_slice(reply)
            .unwrap_or_else(|e| panic!("a reply is not JSON ({e}): {text}"));
        match &v {
            Value::Array(entries) => {
                assert!(!entries.is_empty(), "an empty batch reply");
                let mut ids = Vec::new();
                let mut nulls = 0;
                for e in entries {
                    match envelope(e, &text) {
                        Some(id) => ids.push(id),
                        None => nulls += 1,
                    }
                }
                let mut sorted = ids.clone();
                sorted.sort();
                let batch = self
                    .batches
                    .iter_mut()
                    .find(|b| {
                        let mut want = b.ids.clone();
                        want.sort();
                        !b.answered && want == sorted && b.invalid == nulls
                    })
                    .unwrap_or_else(|| panic!("a batch reply no batch expects: {text}"));
                batch.answered = true;
                for (id, e) in ids
                    .iter()
                    .zip(entries.iter().filter(|e| !e["id"].is_null()))
                {
                    self.answered(id, e, &text);
                }
            }
            _ => match envelope(&v, &text) {
                Some(id) => {
                    let single = self.ins.get(&id).is_some_and(|r| r.single);
                    assert!(single, "a reply to no single request: {text}");
                    self.answered(&id, &v, &text);
                }
                None => self.null_replies += 1,
            },
        }
    }

    /// The reply `r` to the incoming request `id`.
    fn answered(&mut self, id: &str, r: &Value, text: &str) {
        let req = self
            .ins
            .get_mut(id)
            .unwrap_or_else(|| panic!("a reply to a request never sent: {text}"));
        req.replies += 1;
        assert_eq!(req.replies, 1, "request {id} answered twice: {text}");
        let (method, tag) = (req.method, req.tag);
        match (method, r.get("result")) {
            ("ping", _) => assert_eq!(r["result"], "pong", "{text}"),
            ("nope", _) => assert_eq!(r["error"]["code"], -32601, "{text}"),
            ("ask", Some(res)) => {
                let out = self.outs.values().find(|o| o.owner == Owner::Handler(tag));
                if let Some(a) = res.get("answered") {
                    let o =
                        out.unwrap_or_else(|| panic!("an answer to a request never sent: {text}"));
                    assert!(o.answers.contains(a), "not the answer sent: {text}");
                } else {
                    let why = res["no_answer"]
                        .as_str()
                        .unwrap_or_else(|| panic!("{text}"));
                    if let Some(o) = out {
                        assert_ne!(o.state, State::Answered, "answered, yet {why}: {text}");
                    }
                }
            }
            _ => {}
        }
    }

    async fn finish(mut self) {
        if !self.closed {
            self.close();
        }
        self.settle().await;
        self.absorb();
        assert!(
            self.futures.iter().all(Option::is_none),
            "a request future still waits after the close"
        );
        // Calls still running, or waiting for a slot, end by their timeout
        // (counted from their arrival).
        if self.conn.messages_in_flight() > 0 || self.conn.in_flight() > 0 {
            tokio::time::advance(CALL_TIMEOUT).await;
            self.elapsed += CALL_TIMEOUT;
            self.settle().await;
            self.absorb();
        }
        assert_eq!(self.conn.messages_in_flight(), 0, "messages never answered");
        assert_eq!(self.conn.in_flight(), 0, "calls that never end");
        assert_eq!(self.peer.pending(), 0, "requests pending after the close");
        for (i, c) in self.callbacks.iter().enumerate() {
            if let Some((id, _)) = c {
                assert_eq!(
                    self.callback_calls.get(id),
                    Some(&1),
                    "request_with's callback {i} (id {id}) never ran"
                );
            }
        }
        for (id, r) in &self.ins {
            assert!(
                r.replies == 1 || (r.may_skip && r.replies == 0),
                "request {id} ({}) got {} replies",
                r.method,
                r.replies
            );
        }
        assert!(
            self.batches.iter().all(|b| b.answered),
            "a batch never answered"
        );
        assert!(
            (self.garbage..=self.garbage + self.null_budget).contains(&self.null_replies),
            "{} replies with id null for {} garbage messages",
            self.null_replies,
            self.garbage
        );
    }
}

/// Checks a response's envelope; returns its id as JSON text (`None` for
/// null).
fn envelope(v: &Value, text: &str) -> Option<String> {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("a reply entry is not an object: {text}"));
    assert_eq!(o.get("jsonrpc"), Some(&json!("2.0")), "{text}");
    for k in o.keys() {
        assert!(
            matches!(k.as_str(), "jsonrpc" | "id" | "result" | "error"),
            "member {k} in {text}"
        );
    }
    assert!(
        o.contains_key("result") != o.contains_key("error"),
        "result and error: {text}"
    );
    if let Some(e) = o.get("error") {
        let e = e.as_object().unwrap_or_else(|| panic!("{text}"));
        assert!(e.get("code").is_some_and(Value::is_i64), "{text}");
        assert!(e.get("message").is_some_and(Value::is_string), "{text}");
        assert!(
            e.keys()
                .all(|k| matches!(k.as_str(), "code" | "message" | "data")),
            "{text}"
        );
    }
    match o.get("id") {
        Some(Value::Null) => {
            assert!(o.contains_key("error"), "a result for id null: {text}");
            None
        }
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id.to_string()),
        _ => panic!("a reply without a valid id: {text}"),
    }
}
