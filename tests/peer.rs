//! Two-way traffic: requests and responses in one message, classified in
//! the same pass; outbound requests and notifications; responses matched to
//! pending requests, never answered; unknown ones counted.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rpcwire::message::{Incoming, Message, Status};
use rpcwire::peer::{Outbound, PeerError, PendingTable, SendError};
use rpcwire::{Call, Connection, Context, Dispatcher, Parser, RpcError};
use serde_json::{Value, json};

/// An outbound queue that keeps what was sent.
#[derive(Default)]
struct Sent(Mutex<Vec<Bytes>>);

impl Outbound for Sent {
    fn send(&self, message: Bytes) -> Result<(), SendError> {
        self.0.lock().unwrap().push(message);
        Ok(())
    }
}

impl Sent {
    fn take(&self) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .drain(..)
            .map(|b| serde_json::from_slice(&b).unwrap())
            .collect()
    }
}

/// A connection whose context has a peer sending through `sent`, and
/// that peer.
fn two_way(sent: &Arc<Sent>) -> (rpcwire::peer::Peer, Connection) {
    let ctx = Context::builder().outbound(sent.clone()).build();
    let peer = ctx.peer().unwrap().clone();
    (peer, Connection::with_context(ctx))
}

/// A dispatcher with `ping` (answers `"pong"`), and one with `ping` and
/// the async `later` (answers 7).
#[cfg(feature = "async")]
fn ping_and_later() -> (Dispatcher<()>, Dispatcher<(), rpcwire::dispatch::WithAsync>) {
    let ping = |_: Call<()>| Ok::<_, RpcError>("pong");
    let d = Dispatcher::builder(())
        .method("ping", ping)
        .build()
        .unwrap();
    let with_async = Dispatcher::builder(())
        .method("ping", ping)
        .async_method("later", |_: rpcwire::dispatch::AsyncCall<()>| async {
            Ok::<_, RpcError>(7)
        })
        .build()
        .unwrap();
    (d, with_async)
}

/// How the requests [`ask_into`] sent ended: each result's JSON text
/// (`None` for an error object), or why no answer came.
type Outcomes = Arc<Mutex<Vec<Result<Option<Vec<u8>>, PeerError>>>>;

/// Sends `roots/list` through `peer`; how it ends goes to `outcome`.
fn ask_into(peer: &rpcwire::peer::Peer, outcome: &Outcomes) -> u64 {
    let o = outcome.clone();
    peer.request_with("roots/list", None::<&()>, None, move |r| {
        o.lock()
            .unwrap()
            .push(r.map(|a| a.result().map(<[u8]>::to_vec).ok()));
    })
    .unwrap()
}

#[test]
fn a_mixed_batch_is_classified_in_one_pass() {
    let arena = bumpalo::Bump::new();
    let input = br#"[{"jsonrpc":"2.0","id":1,"result":{"ok":true}},
        {"jsonrpc":"2.0","id":2,"method":"ping"},
        {"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"no"}},
        {"jsonrpc":"2.0","method":"note"},
        {"jsonrpc":"2.0","id":4,"result":1,"error":{"code":1,"message":"both"}},
        {"jsonrpc":"1.0","id":5,"result":1},
        {"jsonrpc":"2.0","id":6},
        7]"#;
    let Message::Batch(batch) = Parser::new().parse_incoming(input, &arena).unwrap() else {
        panic!("a batch")
    };
    let items: Vec<Incoming> = batch.collect();
    assert!(
        matches!(items[0], Incoming::Response(r) if r.result().unwrap().as_bytes() == br#"{"ok":true}"#)
    );
    assert!(matches!(items[1], Incoming::Request(r) if r.method() == "ping"));
    assert!(matches!(items[2], Incoming::Response(r) if r.result().unwrap_err().code() == -32000));
    assert!(matches!(items[3], Incoming::Request(r) if r.is_notification()));
    // Malformed responses are still responses: reported, never answered.
    assert!(matches!(items[4], Incoming::InvalidResponse(r) if r.id().unwrap().as_bytes() == b"4"));
    assert!(matches!(items[5], Incoming::InvalidResponse(_)));
    // Neither a request nor a response: an invalid request.
    assert!(matches!(items[6], Incoming::Invalid(i) if i.id().as_bytes() == b"6"));
    assert!(matches!(items[7], Incoming::Invalid(_)));
    assert!(items.iter().filter(|i| i.is_response()).count() == 4);
}

#[test]
fn responses_are_matched_and_never_answered() {
    let sent = Arc::new(Sent::default());
    let ctx = Context::builder()
        .transport("ws")
        .outbound(sent.clone())
        .build();
    let peer = ctx.peer().unwrap().clone();
    let d = Dispatcher::builder(())
        .method("ask_client", |c: Call<'_, ()>| {
            // A handler sends a request and a notification to its client.
            let answered = Arc::new(Mutex::new(None));
            let slot = answered.clone();
            c.ctx
                .peer()
                .unwrap()
                .request_with("roots/list", Some(&json!({})), None, move |r| {
                    *slot.lock().unwrap() = Some(r);
                })
                .map_err(|e| RpcError::internal(e.to_string()))?;
            c.ctx
                .notify("notifications/progress", &json!({"progress": 1}));
            Ok::<_, RpcError>("asked")
        })
        .build()
        .unwrap();
    let mut conn = Connection::with_context(ctx);
    let mut out = Vec::new();
    d.handle(
        br#"{"jsonrpc":"2.0","id":"a","method":"ask_client"}"#,
        &mut conn,
        &mut out,
    );
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":"a","result":"asked"}"#);
    let sent_now = sent.take();
    assert_eq!(sent_now[0]["method"], "roots/list");
    assert_eq!(sent_now[1]["method"], "notifications/progress");
    let id = sent_now[0]["id"].as_u64().unwrap();
    assert_eq!(peer.pending(), 1);

    // The client's answer, in a batch with a request of its own: the
    // response is matched, the request answered, nothing else written.
    let (tx, rx) = std::sync::mpsc::channel();
    let id2 = peer
        .request_with("sampling/createMessage", None::<&()>, None, move |r| {
            tx.send(r).unwrap();
        })
        .unwrap();
    sent.take();
    let input = format!(
        r#"[{{"jsonrpc":"2.0","id":{id2},"result":{{"text":"hi"}}}},{{"jsonrpc":"2.0","id":9,"method":"ask_client"}},{{"jsonrpc":"2.0","id":999,"result":null}}]"#
    );
    out.clear();
    d.handle(input.as_bytes(), &mut conn, &mut out);
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(r, json!([{"jsonrpc": "2.0", "id": 9, "result": "asked"}]));
    let answer = rx.try_recv().unwrap().unwrap();
    assert_eq!(answer.result().unwrap(), br#"{"text":"hi"}"#);
    #[derive(serde::Deserialize)]
    struct Text {
        text: String,
    }
    assert_eq!(answer.decode::<Text>().unwrap().text, "hi");
    // The response to an id never sent is counted, not answered.
    assert_eq!(conn.unmatched_responses(), 1);
    // A lone response: no reply at all.
    out.clear();
    assert!(
        !d.handle(
            format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-1,"message":"denied"}}}}"#)
                .as_bytes(),
            &mut conn,
            &mut out
        )
    );
    assert!(out.is_empty());
    assert_eq!(peer.pending(), 1, "the roots/list request was answered");
    assert_eq!(conn.unmatched_responses(), 1);
}

/// An invalid answer to a pending request ends that request at once: it
/// waited before until its deadline, or for ever without one.
#[test]
fn an_invalid_answer_to_a_pending_request_fails_it() {
    let (peer, mut conn) = two_way(&Arc::default());
    let d = Dispatcher::builder(()).build().unwrap();
    let outcome = Outcomes::default();
    let ask = || ask_into(&peer, &outcome);
    let (a, b, c) = (ask(), ask(), ask());
    assert_eq!(peer.pending(), 3);
    let input = format!(
        r#"[{{"jsonrpc":"2.0","id":{a},"result":1,"error":{{"code":1,"message":"both"}}}},
            {{"jsonrpc":"1.0","id":{b},"result":2}},
            {{"jsonrpc":"2.0","id":{c},"result":3}}]"#
    );
    let mut out = Vec::new();
    assert!(!d.handle(input.as_bytes(), &mut conn, &mut out));
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    assert_eq!(peer.pending(), 0);
    let outcome = outcome.lock().unwrap();
    assert_eq!(outcome.len(), 3);
    for failed in &outcome[..2] {
        let Err(PeerError::InvalidResponse(e)) = failed else {
            panic!("{failed:?}");
        };
        assert!(
            PeerError::InvalidResponse(*e)
                .to_string()
                .starts_with("the answer was not a valid response: "),
        );
    }
    assert_eq!(outcome[2], Ok(Some(b"3".to_vec())));
    assert_eq!(conn.unmatched_responses(), 2);
}

/// An answer with an id and nothing else (no `result`, no `error`) read
/// as a request without `method`: it was answered -32600 under the id the
/// handlers waited on, and their request waited on. An object with only an
/// awaited id now ends that request as an invalid answer, unanswered, in a
/// single message and in a batch, on the sync and the async path; the same
/// object with an id nobody waits for is still an invalid request.
#[cfg(feature = "async")]
#[tokio::test]
async fn a_bare_answer_to_a_pending_request_fails_it_unanswered() {
    let (peer, mut conn) = two_way(&Arc::default());
    let (d, with_async) = ping_and_later();
    let outcome = Outcomes::default();
    let ask = || ask_into(&peer, &outcome);
    let failed_as_missing_result = |outcome: &Outcomes| {
        let got = outcome.lock().unwrap().pop().expect("the request ended");
        let Err(e @ PeerError::InvalidResponse(_)) = got else {
            panic!("{got:?}");
        };
        assert!(e.to_string().contains("missing member 'result'"), "{e}");
    };

    // Alone: no reply.
    let a = ask();
    let mut out = Vec::new();
    let bare = format!(r#"{{"jsonrpc":"2.0","id":{a}}}"#);
    assert!(!d.handle(bare.as_bytes(), &mut conn, &mut out));
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    assert_eq!(peer.pending(), 0);
    failed_as_missing_result(&outcome);

    // In a batch with a request, an unawaited bare id and a `params`-only
    // one: only the request and the unawaited id are answered.
    let b = ask();
    let unknown = b + 1000;
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":{b},"params":[]}},{{"jsonrpc":"2.0","id":1,"method":"ping"}},{{"jsonrpc":"2.0","id":{unknown}}}]"#
    );
    out.clear();
    assert!(d.handle(batch.as_bytes(), &mut conn, &mut out));
    let replies: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        replies,
        json!([{"jsonrpc":"2.0","id":1,"result":"pong"},
            {"jsonrpc":"2.0","id":unknown,"error":{"code":-32600,"message":"Invalid Request","data":replies[1]["error"]["data"]}}]),
        "{replies}"
    );
    assert!(
        replies[1]["error"]["data"]
            .to_string()
            .contains("missing member 'method'"),
        "{replies}"
    );
    assert_eq!(peer.pending(), 0);
    failed_as_missing_result(&outcome);

    // The async path, a batch that awaits an entry.
    let c = ask();
    let batch =
        format!(r#"[{{"jsonrpc":"2.0","id":2,"method":"later"}},{{"jsonrpc":"2.0","id":{c}}}]"#);
    out.clear();
    with_async
        .handle_async(&Bytes::from(batch), &mut conn, &mut out)
        .await;
    let replies: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(replies, json!([{"jsonrpc":"2.0","id":2,"result":7}]));
    assert_eq!(peer.pending(), 0);
    failed_as_missing_result(&outcome);
    // And alone on the async path.
    let e = ask();
    out.clear();
    with_async
        .handle_async(
            &Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{e}}}"#)),
            &mut conn,
            &mut out,
        )
        .await;
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    failed_as_missing_result(&outcome);
    assert_eq!(conn.unmatched_responses(), 4);
}

/// Two answers to one request in a batch, the second a bare one: the
/// first ends the request, and the second, read as a request once its id
/// no longer waited, had no room reserved in the reply's budget (the
/// budget counted it as an answer): a subtraction that overflowed (a panic
/// in debug builds, a reply past the limit in release). An id this side
/// gave stays an answer's for the whole message: neither is answered.
#[cfg(feature = "async")]
#[tokio::test]
async fn two_answers_to_one_request_in_a_batch_are_both_answers() {
    let (peer, mut conn) = two_way(&Arc::default());
    let (d, with_async) = ping_and_later();
    let ask = || ask_into(&peer, &Outcomes::default());
    let mut out = Vec::new();
    for first in [r#""result":1"#, ""] {
        let a = ask();
        let first = if first.is_empty() {
            format!(r#"{{"jsonrpc":"2.0","id":{a}}}"#)
        } else {
            format!(r#"{{"jsonrpc":"2.0","id":{a},{first}}}"#)
        };
        let bare = format!(r#"{{"jsonrpc":"2.0","id":{a}}}"#);
        out.clear();
        let batch = format!(r#"[{first},{bare},{{"jsonrpc":"2.0","id":"p","method":"ping"}}]"#);
        d.handle(batch.as_bytes(), &mut conn, &mut out);
        let reply: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            reply,
            json!([{"jsonrpc":"2.0","id":"p","result":"pong"}]),
            "{batch}"
        );
        assert_eq!(peer.pending(), 0, "{batch}");
        let a = ask();
        let batch = format!(
            r#"[{{"jsonrpc":"2.0","id":{a}}},{{"jsonrpc":"2.0","id":{a}}},{{"jsonrpc":"2.0","id":"l","method":"later"}}]"#
        );
        out.clear();
        with_async
            .handle_async(&Bytes::from(batch.clone()), &mut conn, &mut out)
            .await;
        let reply: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            reply,
            json!([{"jsonrpc":"2.0","id":"l","result":7}]),
            "{batch}"
        );
        assert_eq!(peer.pending(), 0, "{batch}");
    }
}

/// A batch refused whole (past the parser's batch limit, or one whose
/// too-large replies alone would pass the response limit) runs none of
/// its requests; the answers in it were dropped with them, and the
/// requests they answer waited on (for good without a deadline). They are
/// delivered; the batch is still refused, on the sync and async paths.
#[cfg(feature = "async")]
#[tokio::test]
async fn answers_in_a_batch_refused_whole_still_reach_their_requests() {
    let (peer, mut conn) = two_way(&Arc::default());
    let outcome = Outcomes::default();
    let ask = || ask_into(&peer, &outcome);
    let short_batches = Dispatcher::builder(())
        .parser(Parser::new().max_batch_len(2))
        .method("ping", |_: Call<()>| Ok::<_, RpcError>("pong"))
        .build()
        .unwrap();
    let small_replies = Dispatcher::builder(())
        .max_response_len(60)
        .method("ping", |_: Call<()>| Ok::<_, RpcError>("pong"))
        .build()
        .unwrap();
    let small_async_replies = Dispatcher::builder(())
        .max_response_len(60)
        .async_method("later", |_: rpcwire::dispatch::AsyncCall<()>| async {
            Ok::<_, RpcError>(7)
        })
        .build()
        .unwrap();
    let long_id = "x".repeat(40);
    let mut out = Vec::new();
    for round in 0..3 {
        let a = ask();
        out.clear();
        match round {
            0 => short_batches.handle(
                format!(
                    r#"[{{"jsonrpc":"2.0","id":1,"method":"ping"}},{{"jsonrpc":"2.0","id":2,"method":"ping"}},{{"jsonrpc":"2.0","id":{a},"result":0}}]"#
                )
                .as_bytes(),
                &mut conn,
                &mut out,
            ),
            1 => small_replies.handle(
                format!(
                    r#"[{{"jsonrpc":"2.0","id":{a},"result":1}},{{"jsonrpc":"2.0","id":"{long_id}","method":"ping"}}]"#
                )
                .as_bytes(),
                &mut conn,
                &mut out,
            ),
            _ => {
                small_async_replies
                    .handle_async(
                        &Bytes::from(format!(
                            r#"[{{"jsonrpc":"2.0","id":{a},"result":2}},{{"jsonrpc":"2.0","id":"{long_id}","method":"later"}}]"#
                        )),
                        &mut conn,
                        &mut out,
                    )
                    .await
            }
        };
        let reply: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(reply["id"], Value::Null, "round {round}: {reply}");
        assert!(reply["error"]["code"].is_i64(), "round {round}: {reply}");
        assert_eq!(peer.pending(), 0, "round {round}: {reply}");
        assert_eq!(
            outcome.lock().unwrap().pop(),
            Some(Ok(Some(round.to_string().into_bytes()))),
            "round {round}"
        );
    }
}

/// A message nested past the depth limit is refused whole; the answers
/// in it were lost with it, and the request answered too deep waited (for
/// good without a deadline). The answers within the limit are delivered,
/// the one too deep fails its request as invalid, a single too-deep
/// answer too; the message is still refused.
#[test]
fn answers_in_a_message_refused_as_too_deep_still_end_their_requests() {
    let (peer, mut conn) = two_way(&Arc::default());
    let outcome = Outcomes::default();
    let d = Dispatcher::builder(())
        .parser(Parser::new().max_depth(8))
        .method("ping", |_: Call<()>| Ok::<_, RpcError>("pong"))
        .build()
        .unwrap();
    let deep = format!("{}1{}", "[".repeat(10), "]".repeat(10));
    let (fine, too_deep) = (ask_into(&peer, &outcome), ask_into(&peer, &outcome));
    let mut out = Vec::new();
    d.handle(
        format!(
            r#"[{{"jsonrpc":"2.0","id":{fine},"result":5}},{{"jsonrpc":"2.0","id":{too_deep},"result":{deep}}},{{"jsonrpc":"2.0","id":9,"method":"ping"}}]"#
        )
        .as_bytes(),
        &mut conn,
        &mut out,
    );
    let reply: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert_eq!(peer.pending(), 0);
    let ended = std::mem::take(&mut *outcome.lock().unwrap());
    assert_eq!(ended.len(), 2, "{ended:?}");
    assert!(ended.contains(&Ok(Some(b"5".to_vec()))), "{ended:?}");
    assert!(
        ended
            .iter()
            .any(|e| matches!(e, Err(PeerError::InvalidResponse(_)))),
        "{ended:?}"
    );
    // Alone.
    let alone = ask_into(&peer, &outcome);
    out.clear();
    d.handle(
        format!(r#"{{"jsonrpc":"2.0","id":{alone},"result":{deep}}}"#).as_bytes(),
        &mut conn,
        &mut out,
    );
    assert_eq!(peer.pending(), 0);
    let ended = std::mem::take(&mut *outcome.lock().unwrap());
    assert!(
        matches!(ended.as_slice(), [Err(PeerError::InvalidResponse(_))]),
        "{ended:?}"
    );
}

/// An answer nested past even the 1,024 levels a refused answer is read
/// again with still ends its request (its id read from its top level,
/// before or after its result), and the answers after it in the batch
/// still reach theirs: the walk stopped at it, and they waited for their
/// deadlines (for good without one).
#[test]
fn answers_nested_past_1024_levels_still_end_their_requests() {
    let (peer, mut conn) = two_way(&Arc::default());
    let outcome = Outcomes::default();
    let d = Dispatcher::builder(())
        .method("ping", |_: Call<()>| Ok::<_, RpcError>("pong"))
        .build()
        .unwrap();
    let deep = format!("{}1{}", "[".repeat(1100), "]".repeat(1100));
    let (first, last, after) = (
        ask_into(&peer, &outcome),
        ask_into(&peer, &outcome),
        ask_into(&peer, &outcome),
    );
    let mut out = Vec::new();
    d.handle(
        format!(
            r#"[{{"jsonrpc":"2.0","id":{first},"result":{deep}}},{{"result":{deep},"jsonrpc":"2.0","id":{last}}},{{"jsonrpc":"2.0","id":{after},"result":7}}]"#
        )
        .as_bytes(),
        &mut conn,
        &mut out,
    );
    assert_eq!(peer.pending(), 0);
    let ended = std::mem::take(&mut *outcome.lock().unwrap());
    assert_eq!(ended.len(), 3, "{ended:?}");
    assert!(ended.contains(&Ok(Some(b"7".to_vec()))), "{ended:?}");
    let invalid = ended
        .iter()
        .filter(|e| matches!(e, Err(PeerError::InvalidResponse(_))))
        .count();
    assert_eq!(invalid, 2, "{ended:?}");
    // Alone; and a request nested as deep is no answer.
    let alone = ask_into(&peer, &outcome);
    for (message, pending) in [
        (
            format!(r#"{{"jsonrpc":"2.0","method":"ping","id":{alone},"params":{deep}}}"#),
            1,
        ),
        (
            // Whitespace before it, as an HTTP body or a frame may have.
            format!(
                " \n{{\"jsonrpc\":\"2.0\",\"error\":{{\"code\":1,\"message\":\"m\",\"data\":{deep}}},\"id\":{alone}}}"
            ),
            0,
        ),
    ] {
        out.clear();
        d.handle(message.as_bytes(), &mut conn, &mut out);
        assert_eq!(peer.pending(), pending, "{}", &message[..40]);
    }
    let ended = std::mem::take(&mut *outcome.lock().unwrap());
    assert!(
        matches!(ended.as_slice(), [Err(PeerError::InvalidResponse(_))]),
        "{ended:?}"
    );
}

/// A message of answers alone refused whole (a batch past the batch
/// limit, an answer nested past the depth limit) is not answered, whether
/// or not its answers match requests: it got a -32600 or -32700 with
/// `id: null`, answering answers. One that also holds a request is.
#[test]
fn answers_alone_refused_whole_are_not_answered() {
    let (peer, mut conn) = two_way(&Arc::default());
    let outcome = Outcomes::default();
    let d = Dispatcher::builder(())
        .parser(Parser::new().max_batch_len(2).max_depth(8))
        .method("ping", |_: Call<()>| Ok::<_, RpcError>("pong"))
        .build()
        .unwrap();
    let deep = format!("{}1{}", "[".repeat(10), "]".repeat(10));
    let a = ask_into(&peer, &outcome);
    let mut out = Vec::new();
    for (message, answered) in [
        // Past the batch limit: one matches, two are strangers (one broken).
        (
            format!(
                r#"[{{"jsonrpc":"2.0","id":{a},"result":1}},{{"jsonrpc":"2.0","id":900,"result":2}},{{"jsonrpc":"2.0","id":901,"error":7}}]"#
            ),
            false,
        ),
        // Too deep, nobody waiting.
        (format!(r#"{{"jsonrpc":"2.0","id":902,"result":{deep}}}"#), false),
        (
            format!(r#"[{{"jsonrpc":"2.0","id":903,"result":{deep}}}]"#),
            false,
        ),
        // A request among them, or something else: answered.
        (
            r#"[{"jsonrpc":"2.0","id":904,"result":1},{"jsonrpc":"2.0","id":905,"result":2},{"jsonrpc":"2.0","id":1,"method":"ping"}]"#.to_string(),
            true,
        ),
        (
            r#"[{"jsonrpc":"2.0","id":906,"result":1},{"jsonrpc":"2.0","id":907,"result":2},7]"#.to_string(),
            true,
        ),
        (format!(r#"{{"jsonrpc":"2.0","id":908,"method":"ping","params":{deep}}}"#), true),
    ] {
        out.clear();
        d.handle(message.as_bytes(), &mut conn, &mut out);
        if answered {
            let reply: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(reply["id"], Value::Null, "{message}: {reply}");
            assert!(reply["error"]["code"].is_i64(), "{message}: {reply}");
        } else {
            assert!(out.is_empty(), "{message}: {}", String::from_utf8_lossy(&out));
        }
    }
    assert_eq!(peer.pending(), 0);
    assert_eq!(
        std::mem::take(&mut *outcome.lock().unwrap()),
        [Ok(Some(b"1".to_vec()))]
    );
}

#[test]
fn pending_requests_time_out_and_cancel() {
    let sent = Arc::new(Sent::default());
    let peer = rpcwire::peer::Peer::new(sent.clone());
    let outcome = Arc::new(Mutex::new(Vec::new()));
    let now = Instant::now();
    for (deadline, tag) in [(now, "due"), (now + Duration::from_secs(3600), "later")] {
        let o = outcome.clone();
        peer.request_with("m", None::<&()>, Some(deadline), move |r| {
            o.lock().unwrap().push((tag, r.err()));
        })
        .unwrap();
    }
    assert_eq!(peer.expire(now), 1);
    assert_eq!(
        outcome.lock().unwrap()[0],
        ("due", Some(PeerError::Timeout))
    );
    assert!(peer.cancel(2));
    assert!(!peer.cancel(2));
    assert_eq!(
        outcome.lock().unwrap()[1],
        ("later", Some(PeerError::Cancelled))
    );
    assert_eq!(peer.pending(), 0);

    // The sans-I/O table alone: ids allocated in order, deadlines.
    let mut table = PendingTable::new();
    let a = table.insert('a', Some(now));
    let b = table.insert('b', None);
    assert_eq!((a, b), (1, 2));
    assert_eq!(table.next_deadline(), Some(now));
    let mut expired = Vec::new();
    table.expire(now, |id, w| expired.push((id, w)));
    assert_eq!(expired, [(1, 'a')]);
    assert_eq!(table.len(), 1);
}

#[cfg(feature = "async")]
#[tokio::test]
async fn awaiting_an_outbound_request() {
    /// A client on the other end that answers every request it is sent.
    struct Echo(Mutex<Option<Connection>>, Dispatcher<()>);
    let sent = Arc::new(Sent::default());
    let ctx = Context::builder().outbound(sent.clone()).build();
    let peer = ctx.peer().unwrap().clone();
    let conn = Connection::with_context(ctx);
    let server = Dispatcher::builder(()).build().unwrap();
    let echo = Echo(Mutex::new(Some(conn)), server);
    let ask = tokio::spawn({
        let peer = peer.clone();
        async move {
            peer.request(
                "elicitation/create",
                Some(&json!({"q": 1})),
                Duration::from_secs(5),
            )
            .await
        }
    });
    // Wait for the request to be sent, then feed back its answer.
    let request = loop {
        if let Some(r) = sent.take().pop() {
            break r;
        }
        tokio::task::yield_now().await;
    };
    let answer = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":[1,2]}}"#,
        request["id"]
    );
    let mut conn = echo.0.lock().unwrap().take().unwrap();
    let mut out = Vec::new();
    echo.1.handle(answer.as_bytes(), &mut conn, &mut out);
    assert!(out.is_empty());
    let got = ask.await.unwrap().unwrap();
    assert_eq!(got.result().unwrap(), b"[1,2]");
    // No answer: the request times out and leaves the table.
    let err = peer
        .request("never", None::<&()>, Duration::from_millis(20))
        .await
        .unwrap_err();
    assert_eq!(err, PeerError::Timeout);
    assert_eq!(peer.pending(), 0);
}

#[test]
fn outbound_writers_make_valid_messages() {
    let mut out = bytes::BytesMut::new();
    rpcwire::peer::write_request(&mut out, 3, "a\"b", Some(&json!([1]))).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 3, "method": "a\"b", "params": [1]})
    );
    let mut out = Vec::new();
    rpcwire::peer::write_notification_raw(
        &mut out,
        "eth_subscription",
        Some(br#"{"subscription":"0x1","result":{}}"#),
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["params"]["subscription"], "0x1");
    let mut out = Vec::new();
    rpcwire::peer::write_request_raw(&mut out, rpcwire::Id::NULL, "m", None);
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#);
}

/// A gateway's rewrite of a batch response: the upstream's ids (its own)
/// mapped back to the client's, results and error objects passed on byte
/// for byte (spacing, member order and escapes kept), into both buffer
/// types; the typed writer serializes, and on failure leaves the buffer as
/// it was.
#[test]
fn response_writers_rewrite_a_batch_byte_for_byte() {
    use rpcwire::peer::{write_error_raw, write_response, write_response_raw};
    use rpcwire::response::ResponseMessage;
    let arena = rpcwire::bumpalo::Bump::new();
    let client = br#"[{"jsonrpc":"2.0","id":"a\"1","method":"eth_call"},{"jsonrpc":"2.0","id":-7,"method":"eth_chainId"},{"jsonrpc":"2.0","id":1.5e2,"method":"eth_getBalance"}]"#;
    let Message::Batch(requests) = Parser::new().parse(client, &arena).unwrap() else {
        panic!()
    };
    let client_ids: Vec<rpcwire::Id<'_>> = requests
        .map(|e| e.request().unwrap().id().unwrap())
        .collect();
    // The upstream answered the gateway's ids 100, 101, 102, out of order.
    let upstream = concat!(
        "[ {\"jsonrpc\":\"2.0\",\"id\":102,\"result\":{ \"a\" : [1, \"\\u00e9\"] }},\n",
        "{\"id\":100,\"jsonrpc\":\"2.0\",\"error\":{\"message\":\"execution reverted\", \"code\":3,\"data\":\"0x08\"}},",
        "{\"jsonrpc\":\"2.0\",\"result\":\"0x1\",\"id\":101} ]"
    );
    let Ok(ResponseMessage::Batch(answers)) = rpcwire::parse_response(upstream.as_bytes(), &arena)
    else {
        panic!()
    };
    let expected = concat!(
        r#"[{"jsonrpc":"2.0","id":1.5e2,"result":{ "a" : [1, "\u00e9"] }},"#,
        r#"{"jsonrpc":"2.0","id":"a\"1","error":{"message":"execution reverted", "code":3,"data":"0x08"}},"#,
        r#"{"jsonrpc":"2.0","id":-7,"result":"0x1"}]"#
    );
    let mut vec = Vec::new();
    let mut bytes = bytes::BytesMut::new();
    vec.push(b'[');
    bytes.extend_from_slice(b"[");
    for (n, answer) in answers.clone().enumerate() {
        let answer = answer.unwrap();
        let client_id = client_ids[answer.id().as_u64().unwrap() as usize - 100];
        if n > 0 {
            vec.push(b',');
            bytes.extend_from_slice(b",");
        }
        match answer.result() {
            Ok(result) => {
                write_response_raw(&mut vec, client_id, result.as_bytes());
                write_response_raw(&mut bytes, client_id, result.as_bytes());
            }
            Err(error) => {
                write_error_raw(&mut vec, client_id, error.as_bytes());
                write_error_raw(&mut bytes, client_id, error.as_bytes());
            }
        }
    }
    vec.push(b']');
    bytes.extend_from_slice(b"]");
    assert_eq!(String::from_utf8_lossy(&vec), expected);
    assert_eq!(&bytes[..], expected.as_bytes());
    // What the client reads back: its ids, the upstream's bytes.
    let Ok(ResponseMessage::Batch(back)) = rpcwire::parse_response(&vec, &arena) else {
        panic!()
    };
    for (back, answer) in back.zip(answers) {
        let (back, answer) = (back.unwrap(), answer.unwrap());
        let n = answer.id().as_u64().unwrap() as usize - 100;
        assert_eq!(back.id().as_bytes(), client_ids[n].as_bytes());
        match (back.result(), answer.result()) {
            (Ok(b), Ok(a)) => assert_eq!(b.as_bytes(), a.as_bytes()),
            (Err(b), Err(a)) => assert_eq!(b.as_bytes(), a.as_bytes()),
            _ => panic!("{n}"),
        }
    }
    // The typed writer.
    let mut out = b"[".to_vec();
    write_response(&mut out, client_ids[0], &json!({"status": true})).unwrap();
    assert_eq!(
        out,
        br#"[{"jsonrpc":"2.0","id":"a\"1","result":{"status":true}}"#
    );
    write_response(&mut out, rpcwire::Id::NULL, "q\"").unwrap();
    assert!(out.ends_with(br#"{"jsonrpc":"2.0","id":null,"result":"q\""}"#));
    let before = out.clone();
    let keys_not_strings: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
    assert!(write_response(&mut out, client_ids[1], &keys_not_strings).is_err());
    assert_eq!(out, before);
    let mut out = Vec::new();
    write_error_raw(
        &mut out,
        rpcwire::Id::NULL,
        br#"{"code":-32700,"message":"Parse error"}"#,
    );
    assert_eq!(
        out,
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
    );
}

#[test]
fn every_prefix_of_a_valid_message_is_partial() {
    let parser = Parser::new();
    let arena = bumpalo::Bump::new();
    let messages = [
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0xab","data":"0x"},"latest"]}"#,
        r#"[{"jsonrpc": "2.0", "id": "é\u00e9\"", "method": "m", "params": {"a": [1.5e-3, true, null]}}, {"jsonrpc":"2.0","id":2,"result":"x"}]"#,
        "{\"jsonrpc\":\"2.0\",\r\n \"method\":\"notify\"}",
        r#"{"jsonrpc":"2.0","id":-12.5E+3,"result":{"k":"日本語😀"}}"#,
    ];
    for m in messages {
        let bytes = m.as_bytes();
        for cut in 0..bytes.len() {
            match parser.parse_prefix(&bytes[..cut], &arena) {
                Ok(Status::Partial) => {}
                other => panic!("prefix {cut} of {m}: {other:?}"),
            }
        }
        // Complete, with whatever follows left alone.
        let stream = format!("  {m}\n{m}");
        let Ok(Status::Complete((_, len))) = parser.parse_prefix(stream.as_bytes(), &arena) else {
            panic!("{m}")
        };
        assert_eq!(len, 2 + m.len());
    }
    // Invalid starts are errors at once; so is a message past the size
    // limit, without waiting for its end.
    for bad in ["{]", "[1,,", "{\"a\" 1", "nul", "\"str\"", "{\"a\":\"\\x\""] {
        assert!(
            parser.parse_prefix(bad.as_bytes(), &arena).is_err(),
            "{bad}"
        );
    }
    let small = Parser::new().max_message_len(10);
    let e = small
        .parse_prefix(br#"{"jsonrpc":"2.0","method""#, &arena)
        .unwrap_err();
    assert_eq!(e.limit(), Some(10));
    // A truncated multi-byte character at the end is partial, not invalid.
    assert!(matches!(
        parser.parse_prefix("{\"a\":\"日".as_bytes().split_last().unwrap().1, &arena),
        Ok(Status::Partial)
    ));
}

/// `Id::from_json` takes exactly the ids a parser would keep (one JSON
/// number, string or `null`, nothing around it), so a gateway can write
/// back ids it kept as bytes; the answer for each text agrees with
/// serde_json reading it as one value of those kinds, and an id it takes
/// is echoed byte for byte.
#[test]
fn ids_kept_as_bytes_are_checked_and_written_back_as_they_were() {
    let texts: &[&[u8]] = &[
        b"0",
        b"7",
        b"-0",
        b"-12",
        b"1.5",
        b"1e3",
        b"2E-7",
        b"18446744073709551616",
        b"null",
        b"\"\"",
        b"\"a\"",
        b"\"\\u0041\\n\"",
        "\"é€😀\"".as_bytes(),
        b"01",
        b"-",
        b"1.",
        b".5",
        b"+1",
        b"1e",
        b"0x1",
        b"nul",
        b"nulll",
        b"true",
        b"false",
        b"[]",
        b"{}",
        b"\"a",
        b"\"\\x\"",
        b"\"\x01\"",
        b"\"\xff\"",
        b" 1",
        b"1 ",
        b"\"a\" ",
        b"",
        b"NaN",
        b"\"a\"\"b\"",
    ];
    for text in texts {
        let by_serde = serde_json::from_slice::<Value>(text)
            .is_ok_and(|v| v.is_number() || v.is_string() || v.is_null())
            && !text.first().is_some_and(u8::is_ascii_whitespace)
            && !text.last().is_some_and(u8::is_ascii_whitespace);
        let id = rpcwire::Id::from_json(text);
        assert_eq!(id.is_some(), by_serde, "{}", String::from_utf8_lossy(text));
        if let Some(id) = id {
            assert_eq!(id.as_bytes(), *text);
            let mut out = Vec::new();
            rpcwire::peer::write_response_raw(&mut out, id, b"true");
            let arena = rpcwire::bumpalo::Bump::new();
            let rpcwire::response::ResponseMessage::Single(answer) =
                rpcwire::parse_response(&out, &arena).unwrap()
            else {
                panic!("one response");
            };
            assert_eq!(answer.id().as_bytes(), *text);
        }
    }
    // Past what serde_json reads as a number, still a number.
    assert!(rpcwire::Id::from_json(b"1e400").is_some());
}
