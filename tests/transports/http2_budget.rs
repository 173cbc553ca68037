//! The request-body bytes one HTTP/2 connection may make the server hold
//! ([`Limits::max_connection_body_bytes`]), with a client of the `h2` crate
//! over 127.0.0.1 that sends each stream's body up to its last bytes in
//! one DATA frame and keeps the stream open. Before the budget, one
//! connection could hold `max_in_flight` x `max_message_len` bytes of
//! bodies (1.25 GiB at the defaults): every stream here was held, none
//! answered.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt, select_all};
use h2::client::SendRequest;
use http::{Request, StatusCode};
use rpcwire::dispatch::AsyncCall;
use rpcwire::server::http::HttpService;
use rpcwire::server::{LimitKind, Limits, Metrics};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::served_http::{ServedHttp, serve_http};

/// A guard against hangs, never a measure.
const HANG: Duration = Duration::from_secs(20);
/// What each stream sends before it stops, in one DATA frame (under the
/// 16 KiB frame size): a stream's share of the budget is all of it or
/// none, so how the server's tasks interleave does not change how many
/// fit.
const HELD: usize = 16_000;
/// Room for two streams' [`HELD`] bytes and their last bytes, not three.
const BUDGET: usize = 40_000;
const STREAMS: usize = 8;
const FIT: usize = BUDGET / HELD;
/// The body's last bytes, sent with its end.
const TAIL: &[u8] = b"\"]}";

/// `wait`'s calls: each says it started, waits for `go`, and says when
/// it ends.
#[derive(Default)]
struct St {
    started: Notify,
    go: Notify,
    ended: Notify,
}

struct Srv {
    served: ServedHttp,
    state: Arc<St>,
}

async fn start() -> Srv {
    let limits = Limits {
        max_message_len: 32 * 1024,
        max_connection_body_bytes: BUDGET,
        ..Limits::default()
    };
    let metrics = Arc::new(Metrics::default());
    let d = Dispatcher::builder(St::default())
        .method("len", |call: Call<'_, St>| {
            let (s,): (String,) = call.decode()?;
            Ok::<_, RpcError>(s.len())
        })
        .async_method("wait", |call: AsyncCall<St>| async move {
            let (s,): (String,) = call.decode()?;
            call.state.started.notify_one();
            call.state.go.notified().await;
            call.state.ended.notify_one();
            Ok::<_, RpcError>(s.len())
        })
        .observer(metrics.clone())
        .build()
        .unwrap();
    let state = d.state().clone();
    let service = HttpService::new(d, &limits, Some(metrics.clone()));
    Srv {
        served: serve_http(service, limits, metrics).await,
        state,
    }
}

impl Srv {
    async fn client(&self) -> SendRequest<Bytes> {
        let tcp = TcpStream::connect(self.served.addr).await.unwrap();
        let (client, connection) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(connection);
        client
    }

    fn refused(&self) -> u64 {
        self.served
            .metrics
            .limit_count(LimitKind::ConnectionBodyBytes)
    }

    async fn stop(self) {
        self.served.stop_within(HANG).await;
    }
}

/// A stream's body up to its last bytes: a call of `len` whose string
/// fills it to [`HELD`] bytes.
fn held_part(id: usize) -> Bytes {
    call_part(id, "len")
}

/// [`held_part`], calling `method`.
fn call_part(id: usize, method: &str) -> Bytes {
    padded(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":[""#
    ))
}

/// A notification of `method` padded to [`HELD`] bytes, as [`call_part`].
fn notification_part(method: &str) -> Bytes {
    padded(format!(
        r#"{{"jsonrpc":"2.0","method":"{method}","params":[""#
    ))
}

fn padded(mut body: String) -> Bytes {
    body.extend(std::iter::repeat_n('x', HELD - body.len()));
    Bytes::from(body)
}

/// What `len` answers for [`held_part`]`(id)`.
fn padding(id: usize) -> usize {
    padding_of(id, "len")
}

/// What `method` answers for [`call_part`]`(id, method)`.
fn padding_of(id: usize, method: &str) -> usize {
    HELD - format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":[""#).len()
}

type Answer = (StatusCode, Value);

/// A stream whose body was sent but for its [`TAIL`].
struct Open {
    id: usize,
    body: h2::SendStream<Bytes>,
    answer: BoxFuture<'static, (usize, Answer)>,
}

async fn read_answer(response: h2::client::ResponseFuture) -> Answer {
    let response = response.await.expect("an answer");
    let status = response.status();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("the answer's body");
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    if bytes.is_empty() {
        return (status, Value::Null); // A 204.
    }
    (status, serde_json::from_slice(&bytes).expect("a JSON body"))
}

/// Opens a stream and sends its [`held_part`] in one DATA frame, its
/// flow-control window waited for first (so that it is not split).
async fn open(client: &SendRequest<Bytes>, id: usize) -> Open {
    open_with(client, id, held_part(id)).await
}

/// [`open`], sending `part`.
async fn open_with(client: &SendRequest<Bytes>, id: usize, part: Bytes) -> Open {
    let (response, mut body) = post(client).await;
    body.reserve_capacity(HELD);
    while body.capacity() < HELD {
        poll_fn(|cx| body.poll_capacity(cx))
            .await
            .expect("the stream open")
            .unwrap();
    }
    body.send_data(part, false).unwrap();
    Open {
        id,
        body,
        answer: async move { (id, read_answer(response).await) }.boxed(),
    }
}

/// The answer to a stream refused for the connection's budget.
fn assert_refused((status, v): &Answer) {
    assert_eq!(*status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(
        v["error"]["data"]["reason"], "request bodies of this connection over their limit",
        "{v}"
    );
    assert_eq!(v["error"]["data"]["limit"], BUDGET, "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
}

/// [`STREAMS`] streams hold [`HELD`] bytes each, open: all but [`FIT`] of
/// them are answered `503` while the others are still open, and those,
/// once their bodies end, are answered. Returns after every stream ended.
async fn round(client: &SendRequest<Bytes>, first_id: usize) {
    let refused = settle(client, first_id..first_id + STREAMS, STREAMS - FIT, false).await;
    assert_eq!(refused, STREAMS - FIT);
}

/// Opens a stream holding [`HELD`] bytes for each of `ids`, waits for
/// `at_once` of them to be answered `503` while all are open (before any
/// body ends: an ended body could be answered and give its share back
/// before another's bytes are read), then ends the others' bodies; they
/// must be answered `200` (or, with `late_refusals`, `503`). Returns how
/// many were refused.
async fn settle(
    client: &SendRequest<Bytes>,
    ids: std::ops::Range<usize>,
    at_once: usize,
    late_refusals: bool,
) -> usize {
    let mut open_streams = Vec::new();
    for id in ids {
        open_streams.push(open(client, id).await);
    }
    let (mut bodies, mut answers): (Vec<_>, Vec<_>) = open_streams
        .into_iter()
        .map(|o| ((o.id, o.body), o.answer))
        .unzip();
    for _ in 0..at_once {
        let ((id, answer), _, rest) = tokio::time::timeout(HANG, select_all(answers))
            .await
            .expect("the streams past the budget are answered while the others are open");
        assert_refused(&answer);
        bodies.retain(|(b, _)| *b != id);
        answers = rest;
    }
    for (_, body) in &mut bodies {
        body.send_data(Bytes::from_static(TAIL), true).unwrap();
    }
    at_once + assert_served(answers, late_refusals).await
}

/// Waits for `answers`, each a `200` with the result its id's body asks
/// for (or, with `refusals`, a `503`); returns how many were `503`.
async fn assert_served(answers: Vec<BoxFuture<'static, (usize, Answer)>>, refusals: bool) -> usize {
    let mut refused = 0;
    for answer in answers {
        let (id, (status, v)) = tokio::time::timeout(HANG, answer)
            .await
            .expect("the streams within the budget are answered");
        if refusals && status == StatusCode::SERVICE_UNAVAILABLE {
            refused += 1;
            continue;
        }
        assert_eq!(status, StatusCode::OK, "stream {id}: {v}");
        assert_eq!(v["id"], id, "{v}");
        assert_eq!(v["result"], padding(id), "{v}");
    }
    refused
}

/// Streams past the budget are refused at once, the others served when
/// their bodies end; and the budget is whole again after: a second round
/// of the same shape on the same connection fits as many.
#[tokio::test]
async fn h2_streams_past_the_connection_body_budget_are_refused_at_once() {
    let srv = start().await;
    let client = srv.client().await;
    round(&client, 0).await;
    assert_eq!(srv.refused(), (STREAMS - FIT) as u64);
    round(&client, 100).await;
    assert_eq!(srv.refused(), 2 * (STREAMS - FIT) as u64);
    srv.stop().await;
}

/// A JSON POST on a new stream of `client`, its body left open.
async fn post(client: &SendRequest<Bytes>) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let mut client = client.clone().ready().await.unwrap();
    let request = Request::post("http://127.0.0.1/")
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    client.send_request(request, false).unwrap()
}

/// A client that resets its streams mid-body gives their share back: the
/// round after them fits as many streams as on a fresh connection.
#[tokio::test]
async fn h2_streams_reset_mid_body_give_their_budget_back() {
    let srv = start().await;
    let client = srv.client().await;
    let mut reset = Vec::new();
    for id in 0..FIT {
        reset.push(open(&client, id).await);
    }
    for o in &mut reset {
        o.body.send_reset(h2::Reason::CANCEL);
    }
    drop(reset);
    // A whole request after the resets: answered once the server has read
    // them (one connection's frames are read in order).
    let mut small = open_small(&client).await;
    small
        .body
        .send_data(Bytes::from_static(TAIL), true)
        .unwrap();
    let (_, (status, v)) = tokio::time::timeout(HANG, small.answer)
        .await
        .expect("the connection serves on");
    assert_eq!(status, StatusCode::OK, "{v}");
    round(&client, 100).await;
    assert_eq!(srv.refused(), (STREAMS - FIT) as u64);
    srv.stop().await;
}

/// A stream with a short body but for its [`TAIL`].
async fn open_small(client: &SendRequest<Bytes>) -> Open {
    let (response, mut body) = post(client).await;
    body.send_data(
        Bytes::from_static(br#"{"jsonrpc":"2.0","id":50,"method":"len","params":["ab"#),
        false,
    )
    .unwrap();
    Open {
        id: 50,
        body,
        answer: async move { (50, read_answer(response).await) }.boxed(),
    }
}

/// A body whose call is still running holds its share (the call's params
/// are slices of it): with one such call waiting, one more stream fits,
/// not two; once the call is answered, its share is back.
#[tokio::test]
async fn h2_bodies_of_running_calls_hold_their_share() {
    let srv = start().await;
    let client = srv.client().await;
    let mut running = open_with(&client, 1, call_part(1, "wait")).await;
    running
        .body
        .send_data(Bytes::from_static(TAIL), true)
        .unwrap();
    tokio::time::timeout(HANG, srv.state.started.notified())
        .await
        .expect("the call runs");
    let (mut bodies, answers): (Vec<_>, Vec<_>) = [open(&client, 2).await, open(&client, 3).await]
        .into_iter()
        .map(|o| ((o.id, o.body), o.answer))
        .unzip();
    let ((id, refused), _, rest) = tokio::time::timeout(HANG, select_all(answers))
        .await
        .expect("the stream past the budget is answered");
    assert_refused(&refused);
    assert_eq!(srv.refused(), 1);
    srv.state.go.notify_one();
    let (_, (status, v)) = tokio::time::timeout(HANG, running.answer)
        .await
        .expect("the call is answered");
    assert_eq!(
        (status, &v["result"]),
        (StatusCode::OK, &padding_of(1, "wait").into()),
        "{v}"
    );
    // The running call's share is back: the open stream and a new one fit.
    let (_, mut body) = bodies.drain(..).find(|(b, _)| *b != id).unwrap();
    let mut third = open(&client, 4).await;
    body.send_data(Bytes::from_static(TAIL), true).unwrap();
    third
        .body
        .send_data(Bytes::from_static(TAIL), true)
        .unwrap();
    let answers = rest.into_iter().chain([third.answer]).collect();
    assert_eq!(assert_served(answers, false).await, 0);
    assert_eq!(srv.refused(), 1);
    srv.stop().await;
}

/// Two streams holding [`HELD`] bytes each, open: when the budget has
/// room for one of them only, the other is answered `503` at once (its
/// body not ended). The open ones are then ended and must be answered
/// `200`. Returns how many were refused.
async fn two_streams(client: &SendRequest<Bytes>, first_id: usize, room_for_one: bool) -> usize {
    settle(client, first_id..first_id + 2, room_for_one as usize, true).await
}

/// An async notification still running after its request's `204` keeps
/// the body's share (its params are slices of the body, kept alive by the
/// call): with it running, one more stream fits, not two; once it ends,
/// two fit. Before, the share went back with the `204`, and the call's
/// bytes were held uncounted (no stream was refused: the first wait here
/// timed out).
#[tokio::test]
async fn h2_async_notifications_running_after_the_answer_hold_their_share() {
    let srv = start().await;
    let client = srv.client().await;
    let mut note = open_with(&client, 1, notification_part("wait")).await;
    note.body.send_data(Bytes::from_static(TAIL), true).unwrap();
    tokio::time::timeout(HANG, srv.state.started.notified())
        .await
        .expect("the notification runs");
    let (_, (status, v)) = tokio::time::timeout(HANG, note.answer)
        .await
        .expect("the notification is answered while it runs");
    assert_eq!((status, v), (StatusCode::NO_CONTENT, Value::Null));
    assert_eq!(two_streams(&client, 10, true).await, 1);
    assert_eq!(srv.refused(), 1);
    srv.state.go.notify_one();
    // `ended` is notified in the call's last poll, and the test's runtime
    // has one thread: the test runs on only after the task that drove the
    // call (and gave its share back) has returned.
    tokio::time::timeout(HANG, srv.state.ended.notified())
        .await
        .expect("the notification ends");
    assert_eq!(
        two_streams(&client, 20, false).await,
        0,
        "the share is back"
    );
    assert_eq!(srv.refused(), 1);
    srv.stop().await;
}

/// A body's chunks, as hyper hands them out: each a slice of the buffer
/// it read them into. Past the last chunk the body ends (`ends`) or waits
/// for more for ever.
struct Chunks {
    chunks: std::collections::VecDeque<Bytes>,
    ends: bool,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match self.chunks.pop_front() {
            Some(chunk) => std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk)))),
            None if self.ends => std::task::Poll::Ready(None),
            None => std::task::Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ends && self.chunks.is_empty()
    }
}

/// A read buffer that says when it is freed.
struct ReadBuffer {
    bytes: Vec<u8>,
    freed: Arc<std::sync::atomic::AtomicBool>,
}

impl AsRef<[u8]> for ReadBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        self.freed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The first chunk of a body with more to come is copied, not kept as
/// the slice of the connection's read buffer it came in: kept, a few
/// bytes counted against the connection's body budget pinned all of
/// h2's buffer (with other frames between two DATA frames, about 8 KiB
/// per counted byte) until the body ended. A body that comes whole in
/// one chunk is still taken without a copy, and answered.
#[tokio::test]
async fn a_first_chunk_does_not_pin_the_buffer_it_was_read_into() {
    use tower::{Service, ServiceExt};
    let d = Dispatcher::builder(St::default())
        .method("len", |call: Call<'_, St>| {
            let (s,): (String,) = call.decode()?;
            Ok::<_, RpcError>(s.len())
        })
        .build()
        .unwrap();
    let mut service = HttpService::new(d, &Limits::default(), None);
    let message = br#"{"jsonrpc":"2.0","id":1,"method":"len","params":["abc"]}"#;
    // The connection's read buffer: the body's first bytes, then other
    // frames' bytes.
    let read_buffer = |freed: &Arc<std::sync::atomic::AtomicBool>| {
        let mut bytes = message.to_vec();
        bytes.resize(64 * 1024, b' ');
        Bytes::from_owner(ReadBuffer {
            bytes,
            freed: freed.clone(),
        })
    };
    let request = |chunks: Vec<Bytes>, ends: bool| {
        Request::post("/")
            .header("content-type", "application/json")
            .body(Chunks {
                chunks: chunks.into(),
                ends,
            })
            .unwrap()
    };

    // More to come: the first 20 bytes are read, then the body waits.
    let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let buffer = read_buffer(&freed);
    let mut answer = ServiceExt::<Request<Chunks>>::ready(&mut service)
        .await
        .unwrap()
        .call(request(vec![buffer.slice(..20)], false));
    assert!(
        futures_util::poll!(&mut answer).is_pending(),
        "a body still coming was answered"
    );
    drop(buffer);
    assert!(
        freed.load(std::sync::atomic::Ordering::SeqCst),
        "the body's first chunk pinned the buffer it was read into"
    );
    drop(answer);

    // The same body whole, in two chunks, and in one: answered alike.
    for split in [Some(20), None] {
        let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let buffer = read_buffer(&freed);
        let chunks = match split {
            Some(at) => vec![buffer.slice(..at), buffer.slice(at..message.len())],
            None => vec![buffer.slice(..message.len())],
        };
        drop(buffer);
        let response = ServiceExt::<Request<Chunks>>::ready(&mut service)
            .await
            .unwrap()
            .call(request(chunks, true))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let reply: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(reply["result"], 3, "{reply} ({split:?})");
        assert!(freed.load(std::sync::atomic::Ordering::SeqCst));
    }
}
