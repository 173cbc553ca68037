//! The two-way (peer) parts at their edges: id matching, late, duplicate
//! and malformed responses, mixed batches, cancellation signals, closed
//! connections, pending-table memory, prefix parsing, allocations. Three
//! findings of a review are among them, each failing before its fix: a
//! call's cancellation signal fired when it finished and stopped reading
//! as cancelled once its slot ran another call, and a handler asking a
//! client whose input had ended waited out its timeout.

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use counting_alloc::{CountingAlloc, allocations_during};
use rpcwire::dispatch::{AsyncCall, Cancellation, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::message::{Incoming, Message, Status};
use rpcwire::peer::{Outbound, Peer, PeerError, SendError};
use rpcwire::server::stream::Driver;
use rpcwire::{Call, Connection, Context, Dispatcher, Parser, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[derive(Default)]
struct Sent(Mutex<Vec<Bytes>>);

impl Outbound for Sent {
    fn send(&self, message: Bytes) -> Result<(), SendError> {
        self.0.lock().unwrap().push(message);
        Ok(())
    }
}

type Answers = Arc<Mutex<Vec<(u64, Result<Vec<u8>, String>)>>>;

/// A sync dispatcher with one method, a connection whose peer writes to
/// `Sent`, and the peer.
fn two_way() -> (Dispatcher<()>, Connection, Peer, Arc<Sent>) {
    let sent = Arc::new(Sent::default());
    let ctx = Context::builder().outbound(sent.clone()).build();
    let peer = ctx.peer().unwrap().clone();
    let d = Dispatcher::builder(())
        .method("ping", |c: Call<'_, ()>| c.reply.str("pong"))
        .build()
        .unwrap();
    (d, Connection::with_context(ctx), peer, sent)
}

fn ask(peer: &Peer, answers: &Answers, deadline: Option<Instant>) -> u64 {
    let a = answers.clone();
    let slot = Arc::new(Mutex::new(0u64));
    let s2 = slot.clone();
    let id = peer
        .request_with("q", None::<&()>, deadline, move |r| {
            let id = *s2.lock().unwrap();
            a.lock().unwrap().push((
                id,
                r.map(|o| match o.result() {
                    Ok(v) => v.to_vec(),
                    Err(e) => format!("error {} {}", e.code, e.message).into_bytes(),
                })
                .map_err(|e| e.to_string()),
            ));
        })
        .unwrap();
    *slot.lock().unwrap() = id;
    id
}

fn feed(d: &Dispatcher<()>, conn: &mut Connection, input: &str) -> Vec<u8> {
    let mut out = Vec::new();
    d.handle(input.as_bytes(), conn, &mut out);
    out
}

// ---------------------------------------------------------------------------
// Id matching.

#[test]
fn only_the_integer_id_matches_a_request_sent_with_id_1() {
    let (d, mut conn, peer, _) = two_way();
    let answers = Answers::default();
    let id = ask(&peer, &answers, None);
    assert_eq!(id, 1);
    for other in [
        r#""1""#, "1.0", "1e0", "1E0", "10e-1", "-1", "null", r#""0x1""#,
    ] {
        let out = feed(
            &d,
            &mut conn,
            &format!(r#"{{"jsonrpc":"2.0","id":{other},"result":"wrong"}}"#),
        );
        assert!(out.is_empty(), "a response is never answered ({other})");
        assert_eq!(peer.pending(), 1, "id {other} must not match request 1");
    }
    assert_eq!(conn.unmatched_responses(), 8);
    // Whitespace around the id is not part of it.
    feed(
        &d,
        &mut conn,
        r#"{"jsonrpc":"2.0", "id" : 1 , "result":"right"}"#,
    );
    assert_eq!(peer.pending(), 0);
    assert_eq!(answers.lock().unwrap()[0], (1, Ok(br#""right""#.to_vec())));
}

#[test]
fn late_duplicate_and_malformed_responses_are_reported_not_matched() {
    let (d, mut conn, peer, sent) = two_way();
    let answers = Answers::default();
    let now = Instant::now();
    // Request 1 times out; request 2 is cancelled; request 3 is live.
    let a = ask(&peer, &answers, Some(now));
    let b = ask(&peer, &answers, None);
    assert_eq!(peer.expire(now), 1);
    assert!(peer.cancel(b));
    let c = ask(&peer, &answers, None);
    assert!(c > b && b > a, "ids are never reused");
    assert_eq!(sent.0.lock().unwrap().len(), 3);
    // Late answers to 1 and 2: counted, and request 3 untouched.
    for late in [a, b] {
        assert!(
            feed(
                &d,
                &mut conn,
                &format!(r#"{{"jsonrpc":"2.0","id":{late},"result":0}}"#)
            )
            .is_empty()
        );
    }
    assert_eq!(conn.unmatched_responses(), 2);
    assert_eq!(peer.pending(), 1);
    // Both result and error: never answered, counted, and the request it
    // names is over (it waited on for an answer that would not come).
    let both =
        format!(r#"{{"jsonrpc":"2.0","id":{c},"result":1,"error":{{"code":1,"message":"x"}}}}"#);
    assert!(feed(&d, &mut conn, &both).is_empty());
    assert_eq!(conn.unmatched_responses(), 3);
    assert_eq!(peer.pending(), 0);
    let c = ask(&peer, &answers, None);
    // An error response with id null: not answered, counted.
    assert!(
        feed(
            &d,
            &mut conn,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
        )
        .is_empty()
    );
    assert_eq!(conn.unmatched_responses(), 4);
    // The real answer (an error with escapes and data), then a duplicate.
    let real = format!(
        r#"{{"jsonrpc":"2.0","id":{c},"error":{{"code":-32000,"message":"d\u00e9nied \"x\"","data":[1]}}}}"#
    );
    assert!(feed(&d, &mut conn, &real).is_empty());
    assert!(feed(&d, &mut conn, &real).is_empty());
    assert_eq!(conn.unmatched_responses(), 5, "the duplicate is counted");
    let got = answers.lock().unwrap().clone();
    assert_eq!(got.len(), 4);
    assert!(
        matches!(&got[2].1, Err(e) if e.starts_with("the answer was not a valid response")),
        "{:?}",
        got[2]
    );
    assert_eq!(
        got[3],
        (c, Ok("error -32000 dénied \"x\"".as_bytes().to_vec()))
    );
}

/// An answer with its `result` or its `error` twice ends the request it
/// names as invalid, as every other invalid answer to a pending id does;
/// it was counted as unmatched and the request waited for ever (the
/// repeated member made the id unreadable). Found by a review.
#[test]
fn an_answer_with_a_repeated_result_or_error_ends_its_request() {
    for body in [
        r#""result":1,"result":2"#,
        r#""error":{"code":1,"message":"x"},"error":{"code":2,"message":"y"}"#,
    ] {
        let (d, mut conn, peer, _sent) = two_way();
        let answers = Answers::default();
        let id = ask(&peer, &answers, None);
        let input = format!(r#"{{"jsonrpc":"2.0","id":{id},{body}}}"#);
        assert!(feed(&d, &mut conn, &input).is_empty());
        assert_eq!(peer.pending(), 0, "{input}");
        let got = answers.lock().unwrap().clone();
        assert!(
            matches!(&got[..], [(i, Err(e))] if *i == id && e.starts_with("the answer was not a valid response")),
            "{input}: {got:?}"
        );
        assert_eq!(conn.unmatched_responses(), 1, "{input}");
    }
}

#[test]
fn mixed_batches_answer_only_their_requests() {
    let (d, mut conn, peer, _) = two_way();
    let answers = Answers::default();
    let a = ask(&peer, &answers, None);
    let b = ask(&peer, &answers, None);
    let input = format!(
        r#"[{{"jsonrpc":"2.0","id":{a},"result":"A"}},
            {{"jsonrpc":"2.0","id":"s1","method":"ping"}},
            {{"jsonrpc":"2.0","id":77,"result":"unknown"}},
            {{"jsonrpc":"2.0","id":{b},"result":1,"error":{{"code":1,"message":"both"}}}},
            {{"jsonrpc":"2.0","method":"ping"}},
            {{"jsonrpc":"2.0","id":"s2","method":"nope"}}]"#
    );
    let out: Value = serde_json::from_slice(&feed(&d, &mut conn, &input)).unwrap();
    assert_eq!(
        out,
        json!([{"jsonrpc":"2.0","id":"s1","result":"pong"},
               {"jsonrpc":"2.0","id":"s2","error":{"code":-32601,"message":"Method not found","data":{"method":"nope"}}}])
    );
    assert_eq!(conn.unmatched_responses(), 2);
    // The invalid answer ended request b.
    assert_eq!(peer.pending(), 0);
    let b = ask(&peer, &answers, None);
    // A batch of responses (and notifications) only: no reply at all.
    let only = format!(
        r#"[{{"jsonrpc":"2.0","id":{b},"result":"B"}},{{"jsonrpc":"2.0","id":5,"result":0}},{{"jsonrpc":"2.0","method":"ping"}}]"#
    );
    assert!(feed(&d, &mut conn, &only).is_empty());
    assert_eq!(peer.pending(), 0);
    assert_eq!(conn.unmatched_responses(), 3);
}

#[tokio::test]
async fn mixed_batches_through_the_async_engine() {
    let sent = Arc::new(Sent::default());
    let ctx = Context::builder().outbound(sent.clone()).build();
    let peer = ctx.peer().unwrap().clone();
    let d: Dispatcher<(), WithAsync> = Dispatcher::builder(())
        .async_method("later", |_c: AsyncCall<()>| async {
            tokio::task::yield_now().await;
            Ok::<_, RpcError>("done")
        })
        .build()
        .unwrap();
    let mut conn = Connection::with_context(ctx);
    let answers = Answers::default();
    let a = ask(&peer, &answers, None);
    let input = Bytes::from(format!(
        r#"[{{"jsonrpc":"2.0","id":{a},"result":"A"}},{{"jsonrpc":"2.0","id":1,"method":"later"}},{{"jsonrpc":"2.0","id":404,"error":{{"code":1,"message":"?"}}}}]"#
    ));
    let mut out = Vec::new();
    assert!(d.handle_async(&input, &mut conn, &mut out).await);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, json!([{"jsonrpc":"2.0","id":1,"result":"done"}]));
    assert_eq!(peer.pending(), 0);
    assert_eq!(conn.unmatched_responses(), 1);
    // Responses and an async notification only: nothing written.
    let input = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":9,"result":0},{"jsonrpc":"2.0","method":"later"}]"#,
    );
    out.clear();
    assert!(!d.handle_async(&input, &mut conn, &mut out).await);
    assert!(out.is_empty());
}

/// A client-side waiter that panics (it unwraps an answer a hostile server
/// made an error) unwinds through `handle_async` while a batch is half
/// read: the connection goes on with its next message, the half-read
/// batch abandoned (it was left open, and every later message waited for
/// it for ever).
#[tokio::test(start_paused = true)]
async fn a_waiter_panicking_mid_batch_leaves_the_connection_usable() {
    use futures_util::FutureExt;
    let sent = Arc::new(Sent::default());
    let d: Dispatcher<(), WithAsync> = Dispatcher::builder(())
        .async_method("a", |_c: AsyncCall<()>| async { Ok::<_, RpcError>(1) })
        .build()
        .unwrap();
    let mut conn = d.connection(Context::builder().outbound(sent.clone()).build());
    let peer = conn.context().peer().unwrap().clone();
    let id = peer
        .request_with_raw("q", None, None, |answer| {
            answer.unwrap().decode::<u64>().unwrap();
        })
        .unwrap();
    let batch = Bytes::from(format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"a"}},{{"jsonrpc":"2.0","id":{id},"error":{{"code":-1,"message":"no"}}}}]"#
    ));
    let mut out = Vec::new();
    let run = std::panic::AssertUnwindSafe(d.handle_async(&batch, &mut conn, &mut out));
    assert!(run.catch_unwind().await.is_err(), "the waiter panicked");
    assert_eq!(
        conn.messages_in_flight(),
        0,
        "the half-read batch is abandoned"
    );
    let next = Bytes::from_static(br#"{"jsonrpc":"2.0","id":2,"method":"a"}"#);
    let mut out = Vec::new();
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        d.handle_async(&next, &mut conn, &mut out),
    )
    .await;
    assert_eq!(answered, Ok(true), "the next message is answered");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, json!({"jsonrpc":"2.0","id":2,"result":1}));
}

// ---------------------------------------------------------------------------
// Cancellation.

/// A dispatcher whose "hold" handler parks forever after handing its
/// cancellation signal out, and whose "quick" handler finishes at once.
fn cancellable(signals: Arc<Mutex<Vec<Cancellation>>>) -> Dispatcher<(), WithAsync> {
    let s2 = signals.clone();
    Dispatcher::builder(())
        .max_in_flight(1)
        .async_method("hold", move |c: AsyncCall<()>| {
            signals.lock().unwrap().push(c.cancellation().clone());
            std::future::pending::<Result<(), RpcError>>()
        })
        .async_method("quick", move |c: AsyncCall<()>| {
            s2.lock().unwrap().push(c.cancellation().clone());
            async { Ok::<_, RpcError>(1) }
        })
        .build()
        .unwrap()
}

/// Starts `message` on `conn`.
fn start(
    conn: &mut Connection,
    d: &Dispatcher<(), WithAsync>,
    out: &mut Vec<u8>,
    message: &'static [u8],
) {
    conn.start(d, &Bytes::from_static(message), out);
}

async fn drain(conn: &mut Connection, d: &Dispatcher<(), WithAsync>, out: &mut Vec<u8>) {
    while conn.messages_in_flight() > 0 {
        let _ = tokio::time::timeout(
            Duration::from_millis(50),
            std::future::poll_fn(|cx| conn.poll_replies(d, cx, out)),
        )
        .await;
    }
}

#[tokio::test]
async fn a_cancelled_calls_signal_stays_cancelled() {
    let signals = Arc::new(Mutex::new(Vec::new()));
    let d = cancellable(signals.clone());
    let mut conn = Connection::new();
    let mut out = Vec::new();
    start(
        &mut conn,
        &d,
        &mut out,
        br#"{"jsonrpc":"2.0","id":1,"method":"hold"}"#,
    );
    drain_once(&mut conn, &d, &mut out).await;
    let first = signals.lock().unwrap()[0].clone();
    assert!(!first.is_cancelled());
    assert!(conn.cancel(b"1"));
    assert!(first.is_cancelled(), "fires when the client cancels");
    assert!(out.is_empty(), "a cancelled single request gets no reply");
    // The next call runs in the freed slot and finishes.
    start(
        &mut conn,
        &d,
        &mut out,
        br#"{"jsonrpc":"2.0","id":2,"method":"quick"}"#,
    );
    drain(&mut conn, &d, &mut out).await;
    assert_eq!(serde_json::from_slice::<Value>(&out).unwrap()["result"], 1);
    // Work the first handler spawned still holds its signal: it must not
    // read "not cancelled" again.
    assert!(first.is_cancelled(), "call 1 was cancelled, and stays so");
}

#[tokio::test]
async fn a_call_that_finishes_normally_is_not_cancelled() {
    // Docs: "Fires when the call is cancelled (by Connection::cancel or its
    // timeout)". A call that returns is neither.
    let signals = Arc::new(Mutex::new(Vec::new()));
    let d = cancellable(signals.clone());
    let mut conn = Connection::new();
    let mut out = Vec::new();
    start(
        &mut conn,
        &d,
        &mut out,
        br#"{"jsonrpc":"2.0","id":2,"method":"quick"}"#,
    );
    drain(&mut conn, &d, &mut out).await;
    assert_eq!(serde_json::from_slice::<Value>(&out).unwrap()["result"], 1);
    let sig = signals.lock().unwrap()[0].clone();
    assert!(
        !sig.is_cancelled(),
        "a call that answered was not cancelled"
    );
}

async fn drain_once(conn: &mut Connection, d: &Dispatcher<(), WithAsync>, out: &mut Vec<u8>) {
    let _ = std::future::poll_fn(|cx| std::task::Poll::Ready(conn.poll_replies(d, cx, out))).await;
}

#[tokio::test]
async fn cancelling_a_batch_entry_answers_it_and_a_queued_one_too() {
    let signals = Arc::new(Mutex::new(Vec::new()));
    let d = cancellable(signals.clone());
    let mut conn = Connection::new();
    let mut out = Vec::new();
    // Cap 1: the second entry waits in the queue.
    start(&mut conn, &d, &mut out, br#"[{"jsonrpc":"2.0","id":"a","method":"hold"},{"jsonrpc":"2.0","id":"b","method":"hold"},{"jsonrpc":"2.0","id":7,"result":1}]"#);
    drain_once(&mut conn, &d, &mut out).await;
    assert!(conn.cancel(br#""b""#));
    assert!(conn.cancel(br#""a""#));
    drain(&mut conn, &d, &mut out).await;
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v,
        json!([{"jsonrpc":"2.0","id":"a","error":{"code":-32800,"message":"Request cancelled"}},
               {"jsonrpc":"2.0","id":"b","error":{"code":-32800,"message":"Request cancelled"}}])
    );
    assert_eq!(conn.unmatched_responses(), 1);
}

// ---------------------------------------------------------------------------
// Timeouts and the pending table's memory.

#[tokio::test]
async fn timed_out_handlers_leave_no_pending_requests() {
    let sent = Arc::new(Sent::default());
    let ctx = Context::builder().outbound(sent.clone()).build();
    let peer = ctx.peer().unwrap().clone();
    let d: Dispatcher<(), WithAsync> = Dispatcher::builder(())
        .timeout(Some(Duration::from_millis(5)))
        .async_method("ask", |c: AsyncCall<()>| async move {
            let peer = c.ctx.peer().unwrap();
            peer.request("x", None::<&()>, Duration::from_secs(3600))
                .await
                .map(|_| 1)
                .map_err(|e| RpcError::internal(e.to_string()))
        })
        .build()
        .unwrap();
    let mut conn = Connection::with_context(ctx);
    for i in 0..200 {
        let mut out = Vec::new();
        let input = Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ask"}}"#));
        d.handle_async(&input, &mut conn, &mut out).await;
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"]["message"], "Request timed out");
    }
    assert_eq!(peer.pending(), 0, "every dropped call forgot its request");
    // Awaited requests that time out, and request_with + expire.
    for _ in 0..200 {
        let e = peer
            .request("y", None::<&()>, Duration::from_micros(1))
            .await;
        assert_eq!(e.unwrap_err(), PeerError::Timeout);
    }
    let answers = Answers::default();
    let now = Instant::now();
    for _ in 0..1000 {
        ask(&peer, &answers, Some(now));
    }
    assert_eq!(peer.expire(now), 1000);
    assert_eq!(peer.pending(), 0);
}

// ---------------------------------------------------------------------------
// Closed connections.

#[derive(Default)]
struct Seen {
    ctx: Mutex<Option<Context>>,
    outcome: Mutex<Option<Result<(), PeerError>>>,
}

fn asking_dispatcher(seen: Arc<Seen>) -> Dispatcher<Arc<Seen>, WithAsync> {
    Dispatcher::builder(seen)
        .timeout(None)
        .async_method("keep", |c: AsyncCall<Arc<Seen>>| async move {
            *c.state.ctx.lock().unwrap() = Some(c.ctx.clone());
            Ok::<_, RpcError>(true)
        })
        .async_method("ask_client", |c: AsyncCall<Arc<Seen>>| async move {
            *c.state.ctx.lock().unwrap() = Some(c.ctx.clone());
            let peer = c.ctx.peer().unwrap();
            let r = peer
                .request("client/q", None::<&()>, Duration::from_secs(60))
                .await;
            *c.state.outcome.lock().unwrap() = Some(r.as_ref().map(|_| ()).map_err(|e| *e));
            r.map(|_| "answered")
                .map_err(|e| RpcError::internal(e.to_string()))
        })
        .build()
        .unwrap()
}

type Served = tokio::task::JoinHandle<std::io::Result<rpcwire::server::stream::CloseReason>>;
type ClientLines = tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>;
type ClientWriter = tokio::io::WriteHalf<tokio::io::DuplexStream>;

/// A stream connection (newline framing, an in-memory pipe) served by
/// [`asking_dispatcher`]: the server's task, and the client's lines and
/// writer.
fn asking_connection(seen: &Arc<Seen>) -> (Served, ClientLines, ClientWriter) {
    let d = asking_dispatcher(seen.clone());
    let (client, server) = tokio::io::duplex(1 << 16);
    let (sr, sw) = tokio::io::split(server);
    let served = tokio::spawn(async move { Driver::new(Lines::new()).run(&d, sr, sw).await });
    let (cr, cw) = tokio::io::split(client);
    (served, BufReader::new(cr).lines(), cw)
}

#[tokio::test]
async fn a_handler_asking_a_client_that_closed_its_input_fails_fast() {
    let seen = Arc::new(Seen::default());
    let (served, mut lines, mut cw) = asking_connection(&seen);
    cw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ask_client\"}\n")
        .await
        .unwrap();
    let asked: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(asked["method"], "client/q");
    // The client closes its side: it can never answer now.
    cw.shutdown().await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
        .await
        .expect("the pending request must fail when the input ends, not wait 60 s");
    let reply: Value = serde_json::from_str(&reply.unwrap().unwrap()).unwrap();
    assert_eq!(reply["id"], 1);
    assert_eq!(*seen.outcome.lock().unwrap(), Some(Err(PeerError::Closed)));
    served.await.unwrap().unwrap();
}

#[tokio::test]
async fn notifying_and_asking_after_the_connection_closed() {
    let seen = Arc::new(Seen::default());
    let (served, mut lines, mut cw) = asking_connection(&seen);
    cw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"keep\"}\n")
        .await
        .unwrap();
    let _reply = lines.next_line().await.unwrap().unwrap();
    // The client vanishes entirely.
    drop(cw);
    drop(lines);
    let _ = tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the connection ends");
    let ctx = seen.ctx.lock().unwrap().clone().unwrap();
    assert!(!ctx.notify("late", &json!({})), "no panic, false");
    let peer = ctx.peer().unwrap();
    assert_eq!(
        peer.notify("late", &1).unwrap_err(),
        PeerError::Send(SendError::Closed)
    );
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        peer.request("late", None::<&()>, Duration::from_secs(60)),
    )
    .await
    .expect("a request on a closed connection fails at once");
    // Refused before anything is sent: the peer was closed with its
    // connection.
    assert_eq!(r.unwrap_err(), PeerError::Closed);
    assert_eq!(peer.pending(), 0);
}

// ---------------------------------------------------------------------------
// Prefix parsing of mixed traffic.

#[test]
fn every_prefix_of_mixed_batches_is_partial_and_the_whole_matches_parse_incoming() {
    let parser = Parser::new();
    let messages = [
        r#"[{"jsonrpc":"2.0","id":1,"result":{"a":[1,2,{"b":null}]}},{"jsonrpc":"2.0","id":"x","method":"m","params":[1]},{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"n\u00e9 \"q\"","data":{"k":[true,false]}}},{"jsonrpc":"2.0","method":"note"}]"#,
        r#"[ { "id" : 12 , "jsonrpc" : "2.0" , "error" : { "message" : "m" , "code" : -1 } } , { "result" : 0.5e-3 , "id" : null , "jsonrpc" : "2.0" } ]"#,
        r#"[{"jsonrpc":"2.0","id":3,"result":1,"error":{"code":1,"message":"both"}},{"jsonrpc":"1.0","id":5,"result":1},{"jsonrpc":"2.0","id":6},7,"s",[],{"jsonrpc":"2.0","id":8,"result":-12}]"#,
        r#"{"jsonrpc":"2.0","id":123456789,"error":{"code":-32601,"message":"Method not found"}}"#,
        r#"{"error":{"data":"\ud83d\ude00","code":5,"message":""},"id":"r","jsonrpc":"2.0"}"#,
        r#"[{"jsonrpc":"2.0","id":9,"result":"\\"},{"jsonrpc":"2.0","method":"m\u0065","id":10}]"#,
    ];
    for m in messages {
        let bytes = m.as_bytes();
        let arena = bumpalo::Bump::new();
        let whole = format!("{:?}", parser.parse_incoming(bytes, &arena).unwrap());
        for cut in 0..bytes.len() {
            let arena = bumpalo::Bump::new();
            match parser.parse_prefix(&bytes[..cut], &arena) {
                Ok(Status::Partial) => {}
                other => panic!("prefix {cut} of {m}: {other:?}"),
            }
        }
        let stream = format!("{m}{m}");
        let arena = bumpalo::Bump::new();
        let Ok(Status::Complete((msg, len))) = parser.parse_prefix(stream.as_bytes(), &arena)
        else {
            panic!("{m}")
        };
        assert_eq!(len, m.len(), "{m}");
        assert_eq!(
            format!("{msg:?}"),
            whole,
            "same reading as parse_incoming: {m}"
        );
        let spaced = format!(" \n{m} {m}");
        let Ok(Status::Complete((_, len))) = parser.parse_prefix(spaced.as_bytes(), &arena) else {
            panic!("{m}")
        };
        assert_eq!(len, 2 + m.len(), "{m}");
    }
}

#[test]
fn mixed_batches_classify_as_documented() {
    let arena = bumpalo::Bump::new();
    let input = br#"[{"jsonrpc":"2.0","result":1},{"jsonrpc":"2.0","id":1,"error":{"code":1}},{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"x"}},{"jsonrpc":"2.0","id":2,"result":null}]"#;
    let Message::Batch(b) = Parser::new().parse_incoming(input, &arena).unwrap() else {
        panic!()
    };
    let items: Vec<Incoming> = b.collect();
    assert!(matches!(items[0], Incoming::InvalidResponse(_)), "no id");
    assert!(matches!(items[1], Incoming::InvalidResponse(r) if r.id().unwrap().as_bytes() == b"1"));
    assert!(
        matches!(items[2], Incoming::InvalidResponse(_)),
        "non-integer code"
    );
    assert!(matches!(items[3], Incoming::Response(r) if r.result().unwrap().as_bytes() == b"null"));
}

// ---------------------------------------------------------------------------
// Allocation: two-way traffic that matches nothing allocates nothing.

#[test]
fn mixed_traffic_with_unmatched_responses_allocates_nothing() {
    let (d, mut conn, _peer, _) = two_way();
    let msgs: Vec<&[u8]> = vec![
        br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":7,"result":{"a":1}},{"jsonrpc":"2.0","id":"z","error":{"code":-1,"message":"n"}}]"#,
        br#"{"jsonrpc":"2.0","id":8,"result":[1,2,3]}"#,
        br#"{"jsonrpc":"2.0","id":"q","method":"ping"}"#,
    ];
    let mut out = Vec::with_capacity(4096);
    for m in &msgs {
        d.handle(m, &mut conn, &mut out);
    }
    let (n, _) = allocations_during(|| {
        for _ in 0..100 {
            for m in &msgs {
                out.clear();
                d.handle(m, &mut conn, &mut out);
            }
        }
    });
    assert_eq!(n, 0);
    assert_eq!(conn.unmatched_responses(), 303);
}

#[tokio::test]
async fn spawned_work_sees_its_cancellation_after_the_slot_is_reused() {
    let signals = Arc::new(Mutex::new(Vec::new()));
    let d = cancellable(signals.clone());
    let mut conn = Connection::new();
    let mut out = Vec::new();
    start(
        &mut conn,
        &d,
        &mut out,
        br#"{"jsonrpc":"2.0","id":1,"method":"hold"}"#,
    );
    drain_once(&mut conn, &d, &mut out).await;
    let sig = signals.lock().unwrap()[0].clone();
    // Work the handler spawned, as the docs suggest.
    let worker = tokio::spawn(async move { sig.cancelled().await });
    tokio::task::yield_now().await; // the worker registers its waker
    assert!(conn.cancel(b"1"));
    // The transport reads the next message before the worker runs.
    start(
        &mut conn,
        &d,
        &mut out,
        br#"{"jsonrpc":"2.0","id":2,"method":"quick"}"#,
    );
    drain(&mut conn, &d, &mut out).await;
    tokio::time::timeout(Duration::from_secs(2), worker)
        .await
        .expect("the worker of the cancelled call sees its cancellation")
        .unwrap();
}

#[tokio::test]
async fn a_vanished_client_does_not_keep_its_connection_for_the_request_timeout() {
    let seen = Arc::new(Seen::default());
    let (served, mut lines, mut cw) = asking_connection(&seen);
    cw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ask_client\"}\n")
        .await
        .unwrap();
    let _asked = lines.next_line().await.unwrap().unwrap();
    drop(cw);
    drop(lines); // both halves gone: the duplex is closed
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the connection ends, and its pending request fails")
        .unwrap()
        .ok();
    // The handler either saw its request fail, or was dropped with the
    // connection (a client gone entirely has its calls dropped: the
    // driver's write to it fails), never an answer nor a wait.
    let outcome = *seen.outcome.lock().unwrap();
    assert!(
        matches!(outcome, None | Some(Err(PeerError::Closed))),
        "{outcome:?}"
    );
}

#[test]
fn waiters_run_outside_the_lock() {
    let (d, mut conn, peer, _) = two_way();
    let p2 = peer.clone();
    let seen = Arc::new(Mutex::new(None));
    let s2 = seen.clone();
    let id = peer
        .request_with("q", None::<&()>, None, move |_| {
            // Re-entering the peer from a waiter must not deadlock.
            *s2.lock().unwrap() = Some(p2.pending());
            let _ = p2.request_with("again", None::<&()>, None, |_| {});
        })
        .unwrap();
    feed(
        &d,
        &mut conn,
        &format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#),
    );
    assert_eq!(*seen.lock().unwrap(), Some(0));
    assert_eq!(peer.pending(), 1);
    peer.close();
    assert_eq!(peer.pending(), 0);
}

/// `request_with` read the closed flag, then took the lock to insert: a
/// `close` between the two cleared the table before the entry went in, so
/// the request was accepted (`Ok(id)`) and its waiter never called. Two
/// threads race a request against `close` on many fresh peers, started
/// together by spinning so that the calls overlap: each accepted request
/// must hear `Closed`.
#[test]
fn a_request_racing_close_is_refused_or_answered() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    const PEERS: usize = 100_000;
    let peers: Arc<Vec<Peer>> = Arc::new(
        (0..PEERS)
            .map(|_| Peer::new(Arc::new(Sent::default())))
            .collect(),
    );
    let answered: Arc<Vec<AtomicBool>> =
        Arc::new((0..PEERS).map(|_| AtomicBool::new(false)).collect());
    let go = Arc::new(AtomicUsize::new(0));
    let asker = {
        let (peers, answered, go) = (peers.clone(), answered.clone(), go.clone());
        std::thread::spawn(move || {
            (0..PEERS)
                .map(|i| {
                    while go.load(SeqCst) <= i {
                        std::hint::spin_loop();
                    }
                    let answered = answered.clone();
                    peers[i]
                        .request_with("q", None::<&()>, None, move |r| {
                            assert_eq!(r.unwrap_err(), PeerError::Closed);
                            answered[i].store(true, SeqCst);
                        })
                        .is_ok()
                })
                .collect::<Vec<bool>>()
        })
    };
    for (i, peer) in peers.iter().enumerate() {
        go.store(i + 1, SeqCst);
        // A varying head start, so that every interleaving comes up.
        for _ in 0..i % 64 {
            std::hint::spin_loop();
        }
        peer.close();
    }
    let accepted = asker.join().unwrap();
    let lost = (0..PEERS)
        .filter(|&i| accepted[i] && !answered[i].load(SeqCst))
        .count();
    assert_eq!(lost, 0, "accepted requests whose waiter was never called");
    assert!(peers.iter().all(|p| p.pending() == 0));
}

/// A request the transport refuses is forgotten, and its waiter dropped
/// uncalled: that drop ran under the pending table's lock, so a waiter
/// owning something that asks the peer when it goes (here, how many
/// requests wait) deadlocked the thread that sent the request.
#[test]
fn a_refused_requests_waiter_is_dropped_outside_the_lock() {
    struct Refuse;
    impl Outbound for Refuse {
        fn send(&self, _: Bytes) -> Result<(), SendError> {
            Err(SendError::Full)
        }
    }
    /// Reports the peer's pending count when dropped.
    struct AsksWhenDropped(Peer, std::sync::mpsc::Sender<usize>);
    impl Drop for AsksWhenDropped {
        fn drop(&mut self) {
            let _ = self.1.send(self.0.pending());
        }
    }
    let peer = Peer::new(Arc::new(Refuse));
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = AsksWhenDropped(peer.clone(), tx);
    // On a thread of its own: a deadlock shows as no report, not a hung
    // test run.
    let sender =
        std::thread::spawn(move || peer.request_with("q", None::<&()>, None, move |_| drop(owned)));
    let pending = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter was dropped without deadlocking");
    assert_eq!(pending, 0);
    assert_eq!(
        sender.join().unwrap(),
        Err(PeerError::Send(SendError::Full))
    );
}

/// `Driver::run` closed its peer only when it returned: a connection whose
/// future was dropped instead (its task aborted, a `select!` that lost)
/// left the requests sent to its client pending, and work a handler had
/// spawned waited out its whole timeout (an hour here) for an answer that
/// could not come.
#[tokio::test]
async fn a_dropped_connection_fails_the_requests_spawned_work_waits_for() {
    let (tx, rx) = tokio::sync::oneshot::channel::<Result<(), PeerError>>();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let d: Dispatcher<(), WithAsync> = Dispatcher::builder(())
        .async_method("ask_later", move |c: AsyncCall<()>| {
            let tx = tx.clone();
            async move {
                // Answered at once; the question goes on in a task.
                tokio::spawn(async move {
                    let peer = c.ctx.peer().unwrap();
                    let r = peer
                        .request("client/q", None::<&()>, Duration::from_secs(3600))
                        .await;
                    let _ = tx.lock().unwrap().take().unwrap().send(r.map(|_| ()));
                });
                Ok::<_, RpcError>(true)
            }
        })
        .build()
        .unwrap();
    let (client, server) = tokio::io::duplex(1 << 16);
    let (sr, sw) = tokio::io::split(server);
    let served = tokio::spawn(async move { Driver::new(Lines::new()).run(&d, sr, sw).await });
    let (cr, mut cw) = tokio::io::split(client);
    let mut lines = BufReader::new(cr).lines();
    cw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ask_later\"}\n")
        .await
        .unwrap();
    let mut methods = Vec::new();
    for _ in 0..2 {
        let line: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        methods.push(line["method"].as_str().map(str::to_owned));
    }
    assert!(methods.contains(&Some("client/q".into())), "{methods:?}");
    served.abort();
    assert!(served.await.unwrap_err().is_cancelled());
    let outcome = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .expect("the request fails when its connection is dropped, not after an hour")
        .unwrap();
    assert_eq!(outcome, Err(PeerError::Closed));
}

/// `request_with` promises that `on_answer` runs once, with the response
/// or with why none came. A peer whose last clone was dropped without
/// `close` (a transport that does not call it, or a connection's context
/// dropped as it ended) dropped its waiters uncalled: whoever waited on
/// them learnt nothing.
#[test]
fn a_peer_dropped_without_close_tells_its_waiters() {
    let answers = Answers::default();
    let peer = Peer::new(Arc::new(Sent::default()));
    let first = ask(&peer, &answers, None);
    let second = ask(
        &peer,
        &answers,
        Some(Instant::now() + Duration::from_secs(3600)),
    );
    drop(peer);
    let mut got = answers.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [
            (first, Err(PeerError::Closed.to_string())),
            (second, Err(PeerError::Closed.to_string()))
        ]
    );
}

/// A request is in the pending table while it is sent: a `close` that
/// runs then (another thread; here the outbound itself) tells its waiter
/// `Closed`. When the send then failed too, `request_with` also returned
/// the send's error, so a caller counting outcomes heard of the request
/// twice. The outcome is now told once: through `on_answer` when it ran,
/// else by the error.
#[test]
fn a_request_closed_while_it_is_sent_is_reported_once() {
    struct Wire(std::sync::OnceLock<Peer>);
    impl Outbound for Wire {
        fn send(&self, _: Bytes) -> Result<(), SendError> {
            self.0.get().expect("set").close();
            Err(SendError::Full)
        }
    }
    let wire = Arc::new(Wire(std::sync::OnceLock::new()));
    let peer = Peer::new(wire.clone());
    assert!(wire.0.set(peer.clone()).is_ok());
    let heard = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&heard);
    let r = peer.request_with_raw("m", None, None, move |a| {
        keep.lock().unwrap().push(a.err());
    });
    let heard = heard.lock().unwrap();
    assert_eq!(
        heard.len() + usize::from(r.is_err()),
        1,
        "on_answer heard {heard:?} and request_with returned {r:?}"
    );
    assert_eq!(peer.pending(), 0);
}

/// A send that fails with nothing else going on is the caller's error,
/// and `on_answer` is not called.
#[test]
fn a_request_that_cannot_be_sent_is_an_error_and_nothing_else() {
    struct Full;
    impl Outbound for Full {
        fn send(&self, _: Bytes) -> Result<(), SendError> {
            Err(SendError::Full)
        }
    }
    let peer = Peer::new(Arc::new(Full));
    let heard = Arc::new(Mutex::new(0));
    let keep = Arc::clone(&heard);
    let r = peer.request_with_raw("m", None, None, move |_| *keep.lock().unwrap() += 1);
    assert_eq!(r, Err(PeerError::Send(SendError::Full)));
    assert_eq!(*heard.lock().unwrap(), 0);
    assert_eq!(peer.pending(), 0);
}
