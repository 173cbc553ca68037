//! Async dispatch (feature `async`): the same path as synchronous dispatch,
//! with handlers that may await.
//!
//! A connection's [`Engine`] holds every call still running, from any number
//! of messages (transports pipeline: a client may send the next message
//! before the last is answered). When a message is read, each entry is
//! decided at once if it can be (an invalid request, an unknown method, a
//! synchronous handler: run inline) and started otherwise: an async
//! handler's future is created only when a slot under the cap is free
//! (`max_in_flight`), else it waits in a queue; work before its first
//! `.await` runs under the cap too.
//!
//! Replies are written as results arrive, through the one reply writer and
//! under the message's [`Budget`]: a single message's reply goes straight
//! into the caller's buffer; a batch's replies are written in request order
//! into the message's own buffer, those that finish early into a staging
//! buffer until their turn. A finished call frees its slot at once, so a
//! slow entry holds one slot, not the batch. Ids come from the requests,
//! never from re-reading a reply.
//!
//! Each running call costs one allocation: its future, boxed together with
//! what writes its result. Slots, their wakers and the staging buffers are
//! reused; deadlines (the per-request timeout) share one timer.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::panic::catch_unwind;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use tokio::time::Instant;

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use serde::de::DeserializeOwned;

use super::{
    Budget, Dispatcher, DispatcherBuilder, Done, Handler, IntoResponse, Outcome, Reply, ReplyBuf,
    RpcError, Scope, Shared, Sink, TooLarge, WithAsync, guard_panics, panic_error,
};
use crate::codes::REQUEST_CANCELLED;
use crate::conn::{Connection, Context};
use crate::message::{Incoming, Message};
use crate::request::{Entry, Id, Params};
use crate::{Status, lock};

use super::held::{HeldFrame, HeldId, HeldMessages};
use super::reply::{poll_reply, write_error_reply, write_error_tail};

/// An async handler, erased: it makes the call's future, boxed with what
/// writes its result.
pub(crate) type AsyncFn<S> = dyn Fn(AsyncCall<S>) -> Pin<Box<dyn PendingCall>> + Send + Sync;

/// A running async call: polls the handler's future and, when it finishes,
/// writes its result through a [`Reply`] over the sink it is given.
pub(crate) trait PendingCall: Send {
    fn poll_reply(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        sink: Sink<'_>,
        limit: usize,
    ) -> Poll<Result<Done, RpcError>>;

    /// Records on the call's span (feature `tracing`) how it was answered
    /// without finishing: its deadline passed.
    fn answered(&self, outcome: Outcome);
}

pin_project_lite::pin_project! {
    struct Pending<F> {
        #[pin]
        fut: F,
        // The call's span (feature `tracing`), entered while it is polled.
        span: Span,
    }
}

#[cfg(feature = "tracing")]
type Span = tracing::Span;
/// No span without the `tracing` feature.
#[cfg(not(feature = "tracing"))]
type Span = ();

/// A call's span, `method` as it was validated (UTF-8): read as text only
/// with the `tracing` feature (the check cost ~130 instructions per call
/// on the gateway's path without it).
fn span_of(method: &[u8], id: Option<&[u8]>) -> Span {
    #[cfg(feature = "tracing")]
    {
        super::call_span(core::str::from_utf8(method).unwrap_or_default(), id)
    }
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (method, id);
    }
}

impl<F, R> PendingCall for Pending<F>
where
    F: Future<Output = R> + Send,
    R: IntoResponse,
{
    fn poll_reply(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        sink: Sink<'_>,
        limit: usize,
    ) -> Poll<Result<Done, RpcError>> {
        let this = self.project();
        #[cfg(feature = "tracing")]
        let _entered = this.span.enter();
        #[cfg(not(feature = "tracing"))]
        let _ = this.span;
        match this.fut.poll(cx) {
            Poll::Ready(returned) => {
                let done = returned.into_response(Reply::new(sink, limit));
                #[cfg(feature = "tracing")]
                if let Err(e) = &done {
                    this.span.record("code", e.code());
                }
                Poll::Ready(done)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn answered(&self, outcome: Outcome) {
        #[cfg(feature = "tracing")]
        super::record_outcome(&self.span, outcome);
        #[cfg(not(feature = "tracing"))]
        let _ = outcome;
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
impl<S: Send + Sync + 'static, K> DispatcherBuilder<S, K> {
    /// Registers an async handler for `name`; the dispatcher is then driven
    /// by [`Dispatcher::handle_async`] (or a transport).
    ///
    /// The future must be `'static` (it may run after the message's arena is
    /// reused), so it receives what it needs owned, in an [`AsyncCall`]: the
    /// params as a reference-counted slice of the input (never copied), the
    /// state, the connection's context and a cancellation signal. Its output
    /// is a `Result<T, E>` as for synchronous handlers, written straight
    /// into the reply when it is ready.
    ///
    /// Each call's future is boxed (the one allocation of an async call),
    /// so its size is the allocation's: glibc serves blocks up to 1,032
    /// bytes from a per-thread cache and larger ones through its general
    /// path, several hundred instructions more per call. Box a rare
    /// path's large future inside the handler, and prefer a function
    /// returning an `async move` block to an `async fn` taking the
    /// `AsyncCall`, which keeps the call (over 100 bytes) twice in its
    /// future (`-Zprint-type-sizes` shows both).
    ///
    /// ```
    /// use rpcwire::{Connection, Dispatcher, dispatch::AsyncCall};
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let d = Dispatcher::builder(())
    ///     .async_method("eth_chainId", |_call: AsyncCall<()>| async { Ok::<_, rpcwire::RpcError>("0x1") })
    ///     .build()?;
    /// let (mut conn, mut out) = (Connection::new(), Vec::new());
    /// let input = rpcwire::bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#);
    /// d.handle_async(&input, &mut conn, &mut out).await;
    /// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#);
    /// # Ok::<(), rpcwire::router::BuildError>(()) }).unwrap();
    /// ```
    pub fn async_method<F, Fut, R>(
        self,
        name: impl Into<String>,
        handler: F,
    ) -> DispatcherBuilder<S, WithAsync>
    where
        F: Fn(AsyncCall<S>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoResponse + 'static,
    {
        let mut b = self.into_kind::<WithAsync>();
        b.methods
            .push((name.into(), Handler::Async(erase_async(handler))));
        b
    }

    /// Runs the async `handler` for every method no other handler is
    /// registered for; see [`fallback`](DispatcherBuilder::fallback).
    pub fn async_fallback<F, Fut, R>(self, handler: F) -> DispatcherBuilder<S, WithAsync>
    where
        F: Fn(AsyncCall<S>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoResponse + 'static,
    {
        let mut b = self.into_kind::<WithAsync>();
        b.fallback = Some(Handler::Async(erase_async(handler)));
        b
    }

    /// The most async calls of one connection running at once (default
    /// 64). Further entries wait, their futures not yet created, until a
    /// call finishes (or is cancelled or times out); they start in arrival
    /// order, never after a call that arrived later.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// The per-request timeout of async handlers (default 30 s; `None` for
    /// none), counted from the call's arrival: the time it waits for a slot
    /// under [`max_in_flight`](DispatcherBuilder::max_in_flight) counts. A
    /// call still running at its deadline is dropped and answered with the
    /// timeout error ([`timeout_code`](DispatcherBuilder::timeout_code),
    /// message "Request timed out"), `data` giving the timeout; one whose
    /// deadline passed while it waited is answered so without being run.
    /// It affects that entry only. Dropping a running call at its deadline
    /// needs a tokio runtime with its time driver; outside one, or in a
    /// runtime built without `enable_time`, running calls are not dropped
    /// (calls whose deadline passed while they waited for a slot are still
    /// answered as timed out, unrun).
    pub fn timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Makes a notification of `method` cancel a call of the same
    /// connection: the call whose request id is the params member
    /// `id_member` (its JSON text, byte for byte, as ids are matched).
    /// Its future is dropped and its [`Cancellation`] fires, as with
    /// [`Connection::cancel`]; a single request is then answered as
    /// `reply` says, an entry of a batch with [`REQUEST_CANCELLED`]. A call
    /// still waiting for a slot is cancelled too, never run.
    ///
    /// LSP's `$/cancelRequest` (`{"id": …}`, answered with -32800):
    ///
    /// ```
    /// use rpcwire::dispatch::{AsyncCall, CancelledReply};
    /// let d = rpcwire::Dispatcher::builder(())
    ///     .async_method("slow", |_: AsyncCall<()>| std::future::pending::<Result<(), rpcwire::RpcError>>())
    ///     .cancel_notification("$/cancelRequest", "id", CancelledReply::Error)
    ///     .build()?;
    /// # Ok::<(), rpcwire::router::BuildError>(())
    /// ```
    ///
    /// The notification is acted on when it comes as a message of its own
    /// (LSP has no batches; MCP sends it alone); it then goes on to its
    /// handler, if one is registered. Unknown or finished ids are ignored.
    /// rpcwire's stream and WebSocket transports act on it as soon as they
    /// read it, also at their cap on messages in flight
    /// (`server::Limits::max_in_flight`), where the other messages wait for
    /// calls to finish (its handler still runs in its turn); a request
    /// still waiting there is answered as a cancelled call would be and
    /// never starts.
    ///
    /// Either side may cancel in these protocols, so the same notification
    /// goes the other way too: a request a handler sends its client
    /// through the connection's [`Peer`](crate::peer::Peer) and then gives
    /// up on (its timeout; its future dropped, say because the call that
    /// sent it was cancelled; the connection's input ended) is announced
    /// with `{"jsonrpc":"2.0","method":<method>,"params":{<id_member>:<its id>}}`,
    /// once, never after its answer came (see
    /// [`Peer::request_with`](crate::peer::Peer::request_with)). A
    /// dispatcher without a cancellation sends none.
    pub fn cancel_notification(
        mut self,
        method: &str,
        id_member: &str,
        reply: CancelledReply,
    ) -> Self {
        self.cancel_by = Some(CancelBy {
            method: method.into(),
            id_member: id_member.into(),
            reply,
        });
        self
    }

    /// Names the params member of the
    /// [`cancel_notification`](DispatcherBuilder::cancel_notification)
    /// that says why, in words (MCP's `reason`; LSP's `$/cancelRequest`
    /// has none, and then this is not set): the notifications this side
    /// sends for requests it gives up on then carry a short reason there
    /// (no answer before the deadline, the sender no longer waits, the
    /// connection or session ended). Without a `cancel_notification` it
    /// changes nothing.
    ///
    /// ```
    /// use rpcwire::dispatch::CancelledReply;
    /// let d = rpcwire::Dispatcher::builder(())
    ///     .cancel_notification("notifications/cancelled", "requestId", CancelledReply::Nothing)
    ///     .cancel_reason("reason")
    ///     .build()?;
    /// # Ok::<(), rpcwire::router::BuildError>(())
    /// ```
    pub fn cancel_reason(mut self, member: &str) -> Self {
        self.cancel_reason = Some(member.into());
        self
    }

    /// The cancellation this side's peer sends for requests it gives up
    /// on, when it is not read through `cancel_notification` (MCP's layer
    /// reads `notifications/cancelled` itself).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn cancel_notice(mut self, notice: crate::peer::CancelNotice) -> Self {
        self.cancel_notice = Some(notice);
        self
    }

    fn into_kind<K2>(self) -> DispatcherBuilder<S, K2> {
        DispatcherBuilder {
            methods: self.methods,
            discover: self.discover,
            fallback: self.fallback,
            state: self.state,
            parser: self.parser,
            max_response_len: self.max_response_len,
            too_large_code: self.too_large_code,
            timeout_code: self.timeout_code,
            max_in_flight: self.max_in_flight,
            timeout: self.timeout,
            quiet_panics: self.quiet_panics,
            panic_messages: self.panic_messages,
            observer: self.observer,
            cancel_by: self.cancel_by,
            cancel_reason: self.cancel_reason,
            cancel_notice: self.cancel_notice,
            kind: std::marker::PhantomData,
        }
    }
}

/// An async handler, its future's type erased (boxed with what writes its
/// result: the one allocation an async call costs).
fn erase_async<S, F, Fut, R>(handler: F) -> Arc<AsyncFn<S>>
where
    S: Send + Sync + 'static,
    F: Fn(AsyncCall<S>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoResponse + 'static,
{
    Arc::new(move |call| -> Pin<Box<dyn PendingCall>> {
        // `()` without the `tracing` feature.
        #[cfg_attr(not(feature = "tracing"), allow(clippy::let_unit_value))]
        let span = span_of(&call.method, call.id());
        #[cfg(feature = "tracing")]
        let fut = span.in_scope(|| handler(call));
        #[cfg(not(feature = "tracing"))]
        let fut = handler(call);
        Box::pin(Pending { fut, span })
    })
}

#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
impl<S: Send + Sync + 'static, K> Dispatcher<S, K> {
    /// Handles one message whose entries may have async handlers, and
    /// appends the complete reply to `out`, or nothing (notifications,
    /// responses). Returns whether a reply was written.
    ///
    /// The same path as [`handle`](Dispatcher::handle), with the same
    /// arguments, except that the input is `Bytes` so that async handlers
    /// get their params as slices of it without a copy. Synchronous
    /// handlers run inline as the message is read (a batch's synchronous
    /// entries back to back, at most the batch length limit of them); async
    /// ones run concurrently, at most
    /// [`max_in_flight`](DispatcherBuilder::max_in_flight) at a time, each
    /// under the per-request [`timeout`](DispatcherBuilder::timeout); the
    /// replies are written in request order under the response size limit.
    /// A panic in a handler becomes -32603 for that entry only.
    ///
    /// Async notifications keep running after the reply is written, as
    /// long as the connection is driven (the next `handle_async`, or
    /// [`Connection::poll_replies`]); they never hold a reply back. Those
    /// an earlier message left waiting for a slot (past `max_in_flight`)
    /// start before the next message does: its `handle_async` waits for
    /// that, so that however fast messages come, the calls waiting hold
    /// no more than one message's worth.
    ///
    /// Dropping the future before it finishes (a timeout around it, a
    /// client gone) drops the calls still running for the reply, their
    /// [`Cancellation`] fired, and the reply: the connection's next
    /// message gets its own reply only.
    ///
    /// It reads nothing else meanwhile: a handler that asks the other
    /// side something ([`Peer::request`](crate::peer::Peer::request)) and
    /// waits for its answer waits out its timeout, the answer unread behind
    /// this call. Two-way transports read on while calls run, with
    /// [`Connection::start`] and [`Connection::poll_replies`] (see
    /// [`connection`](Dispatcher::connection)).
    pub async fn handle_async<B: ReplyBuf>(
        &self,
        input: &Bytes,
        conn: &mut Connection,
        out: &mut B,
    ) -> bool {
        self.handle_async_then(input, conn, out, |_| {}).await
    }

    /// [`handle_async`](Self::handle_async), with `started` run on the
    /// connection once the message has started (MCP carries out the
    /// cancellations it asked for there).
    pub(crate) async fn handle_async_then<B: ReplyBuf>(
        &self,
        input: &Bytes,
        conn: &mut Connection,
        out: &mut B,
        started: impl FnOnce(&mut Connection),
    ) -> bool {
        let start = out.len();
        if conn.in_flight() > 0 {
            // What earlier messages left running goes on, and the calls
            // they left waiting start first. (Only driven while messages
            // waited for replies, notifications past the cap were never
            // started, and the queue grew with every message.)
            std::future::poll_fn(|cx| {
                // Nothing is written: no message waits for its reply.
                let _ = conn.poll_replies(self, cx, out);
                if conn.engine.waiting.is_empty() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
        // Guarded from the start: a response's waiter (`Peer::request_with`)
        // that panics while a batch is half read unwinds through here, and
        // the batch, left open, would have every later message wait for it.
        let replying = Abandon(conn);
        replying.0.start(self, input, out);
        started(replying.0);
        while replying.0.engine.messages_in_flight() > 0 {
            std::future::poll_fn(|cx| replying.0.poll_until_drained(self, cx, out)).await;
        }
        out.len() > start
    }

    /// A connection whose handlers see `context`, made for this
    /// dispatcher: its peer (when `context` has one) knows the protocol's
    /// [cancellation](DispatcherBuilder::cancel_notification) from the
    /// start, so that a request it sends and gives up on before the
    /// dispatcher handled any message of the connection (a server that
    /// asks its client something as soon as it connects) is announced to
    /// the client too. The peer of a connection made by
    /// [`Connection::with_context`] learns it only when the dispatcher
    /// handles the connection's first message. rpcwire's transports make
    /// their connections here, and so can a transport of your own.
    ///
    /// # A transport of your own
    ///
    /// What rpcwire's transports do (`server::stream` is the reference),
    /// and one of your own needs to:
    ///
    /// * Drive each connection with **one** dispatcher: a call queued by
    ///   one is run by the handler the other has under its name, or, when
    ///   it has none, answered -32603.
    /// * Read on while calls run, when handlers may ask the other side
    ///   something: [`Connection::start`] each message as it arrives,
    ///   [`Connection::poll_replies`] for the replies as they complete.
    ///   [`Dispatcher::handle_async`] reads nothing until its message is
    ///   answered, so an answer its handler waits for stays unread. Bound
    ///   what you read by [`Connection::in_flight`] and
    ///   [`Connection::messages_in_flight`]; at the bound, while the peer
    ///   waits for answers ([`Peer::pending`](crate::peer::Peer::pending)),
    ///   read on, `start` the messages that are answers (they are
    ///   delivered at once, whatever the bound; [`Parser::parse_incoming`](crate::Parser::parse_incoming)
    ///   tells them apart) and hold the others: else calls waiting for
    ///   answers and answers waiting behind them wait for each other.
    /// * Write what handlers send ([`Context::notify`](crate::Context::notify),
    ///   the peer's requests, through your [`Outbound`](crate::peer::Outbound))
    ///   before the replies polled after it: a call's progress then comes
    ///   before its reply.
    /// * Expire this side's requests: after each poll and each message
    ///   sent, arm a timer at [`Peer::next_deadline`](crate::peer::Peer::next_deadline)
    ///   and call [`Peer::expire`](crate::peer::Peer::expire) when it fires.
    /// * At the input's end, wait for the calls with
    ///   [`Connection::poll_until_drained`] (a message may end with no
    ///   reply, and nothing wakes a task waiting in `poll_replies` then),
    ///   and [`Peer::close`](crate::peer::Peer::close) the peer, so that
    ///   requests still waiting for the other side fail at once.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use rpcwire::bytes::Bytes;
    /// use rpcwire::dispatch::CancelledReply;
    /// use rpcwire::peer::{Outbound, SendError};
    /// use rpcwire::{Context, Dispatcher};
    ///
    /// /// What the client would be sent.
    /// #[derive(Default)]
    /// struct Wire(Mutex<Vec<Bytes>>);
    /// impl Outbound for Wire {
    ///     fn send(&self, message: Bytes) -> Result<(), SendError> {
    ///         self.0.lock().unwrap().push(message);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let d = Dispatcher::builder(())
    ///     .cancel_notification("$/cancelRequest", "id", CancelledReply::Error)
    ///     .build()?;
    /// let wire = Arc::new(Wire::default());
    /// let conn = d.connection(Context::builder().outbound(wire.clone()).build());
    /// // Before the client sent anything: ask it, and give up.
    /// let peer = conn.context().peer().unwrap();
    /// let now = std::time::Instant::now();
    /// let params = serde_json::json!({"token": "boot"});
    /// let id = peer.request_with("window/workDoneProgress/create", Some(&params), Some(now), |_| {})?;
    /// assert_eq!(peer.expire(now), 1);
    /// let cancel = format!(r#"{{"jsonrpc":"2.0","method":"$/cancelRequest","params":{{"id":{id}}}}}"#);
    /// assert_eq!(wire.0.lock().unwrap()[1], cancel.as_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connection(&self, context: Context) -> Connection {
        let conn = Connection::with_context(context);
        self.inner.teach_peer(&conn);
        conn
    }
}

/// A connection whose replies are awaited by [`Dispatcher::handle_async`]:
/// dropped before they are all written, the messages waiting for them are
/// abandoned (else their replies would come out with the next message's).
struct Abandon<'c>(&'c mut Connection);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.0.engine.messages_in_flight() > 0 {
            let max_retained = self.0.max_retained;
            self.0.engine.abandon_messages(max_retained);
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
impl Connection {
    /// Reads one message and answers what can be answered at once (writing
    /// complete replies to `out`); async calls start running, each polled
    /// once in its turn (a call, or a batch whose async futures are all
    /// ready then is answered here, as a sync one). Their other
    /// replies come out of [`poll_replies`](Connection::poll_replies), each
    /// as it completes: the pipelined form of
    /// [`Dispatcher::handle_async`], for transports that read the next
    /// message while earlier ones run.
    ///
    /// Both may append several replies to `out` in one call; each is
    /// followed by a call to [`ReplyBuf::end_reply`], so that a transport
    /// sending every reply as a frame of its own knows where one ends.
    pub fn start<S: Send + Sync + 'static, K, B: ReplyBuf>(
        &mut self,
        dispatcher: &Dispatcher<S, K>,
        input: &Bytes,
        out: &mut B,
    ) {
        self.begin_message();
        self.start_begun(dispatcher, input, out);
    }

    /// [`start`](Connection::start) past [`begin_message`](Connection::begin_message).
    fn start_begun<S: Send + Sync + 'static, K, B: ReplyBuf>(
        &mut self,
        dispatcher: &Dispatcher<S, K>,
        input: &Bytes,
        out: &mut B,
    ) {
        let mark = out.len();
        dispatcher.inner.start(input, self, out, None);
        self.finish_start(out, mark);
    }

    /// [`take_answers_at_limit`](Connection::take_answers_at_limit) for a
    /// message the parser refused with `error`: a batch past the batch
    /// limit or a message nested past the depth limit, refused whole in its
    /// turn, has its answers delivered now.
    #[cfg(feature = "server")]
    pub(crate) fn take_refused_answers_at_limit<S: Send + Sync + 'static, K>(
        &self,
        dispatcher: &Dispatcher<S, K>,
        error: crate::Error,
        input: &Bytes,
    ) -> crate::conn::AtLimit {
        self.note_ids_given();
        // Whether it is answers alone is asked again when it is started.
        let _ = dispatcher
            .inner
            .deliver_refused_answers(error, input, Some(input), self);
        match error.kind() {
            crate::error::ErrorKind::BatchTooLarge { .. }
            | crate::error::ErrorKind::TooDeep { .. } => crate::conn::AtLimit::HoldAnswered,
            _ => crate::conn::AtLimit::Hold,
        }
    }

    /// [`start`](Connection::start) for a message the transport held at
    /// its in-flight limit: one whose answers were delivered when it was
    /// held ([`HeldFrame::answers_taken`]) runs only its requests.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn start_held<S: Send + Sync + 'static, K, B: ReplyBuf>(
        &mut self,
        dispatcher: &Dispatcher<S, K>,
        held: &HeldFrame,
        out: &mut B,
    ) {
        self.engine.answers_taken = held.answers_taken;
        self.begin_message();
        self.read_as_when_held(held.ids_given_below);
        self.start_begun(dispatcher, &held.frame, out);
        self.engine.answers_taken = false;
    }

    /// [`start`](Connection::start) for the message at the front of
    /// `input`, which may hold only part of it, or more than it
    /// ([`Parser::parse_prefix`](crate::Parser::parse_prefix)): a complete,
    /// valid message is started and its length returned, found in the
    /// same pass as it is read. Otherwise nothing is written and the
    /// caller frames the bytes another way: `None` for a message cut short
    /// by the end of `input`, or one that is not valid (which the parser
    /// answers once it is framed; [`not_json`](Connection::not_json) says
    /// whether it is not even JSON).
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn start_prefix<S: Send + Sync + 'static, K, B: ReplyBuf>(
        &mut self,
        dispatcher: &Dispatcher<S, K>,
        input: &Bytes,
        out: &mut B,
    ) -> Option<usize> {
        self.begin_message();
        let mark = out.len();
        let mut len = 0;
        dispatcher.inner.start(input, self, out, Some(&mut len));
        self.finish_start(out, mark);
        (len > 0).then_some(len)
    }

    fn finish_start<B: ReplyBuf>(&mut self, out: &mut B, mark: usize) {
        let ended = self.engine.ended_at.take() == Some(out.len());
        if out.len() > mark && !ended {
            out.end_reply();
        }
        // A batch whose async entries were all decided at once (past the
        // size limit) is complete already.
        self.engine.flush_complete(out, self.max_retained);
        self.end_message();
    }

    /// Drives the running calls and appends every reply that completes to
    /// `out`, each one complete. `Ready(n)` once `n > 0` replies were
    /// written; `Pending` otherwise (the waker is called when a call makes
    /// progress or a deadline passes).
    ///
    /// Here and in [`start`](Connection::start), `out`'s
    /// [`end_reply`](ReplyBuf::end_reply) is called after each reply, so a
    /// stream transport can frame each one.
    pub fn poll_replies<S: Send + Sync + 'static, K, B: ReplyBuf>(
        &mut self,
        dispatcher: &Dispatcher<S, K>,
        cx: &mut TaskContext<'_>,
        out: &mut B,
    ) -> Poll<usize> {
        dispatcher.inner.poll(cx, self, out)
    }

    /// [`poll_replies`](Connection::poll_replies), also ready (with 0) when
    /// no message waits for its reply any more: the last one may end
    /// without one (a cancelled call, an async notification), and nothing
    /// would wake a task waiting in `poll_replies` then. A transport
    /// draining a connection at its input's end loops on it while
    /// [`messages_in_flight`](Connection::messages_in_flight) is not 0.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use rpcwire::dispatch::AsyncCall;
    /// use rpcwire::{Connection, Dispatcher, RpcError};
    ///
    /// let d = Dispatcher::builder(())
    ///     .async_method("wait", |_: AsyncCall<()>| async {
    ///         std::future::pending::<()>().await;
    ///         Ok::<_, RpcError>(())
    ///     })
    ///     .build()?;
    /// let mut conn = Connection::new();
    /// let mut out = Vec::new();
    /// let call = rpcwire::bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":7,"method":"wait"}"#);
    /// conn.start(&d, &call, &mut out);
    /// // Cancelled, the call writes no reply.
    /// assert!(conn.cancel(b"7"));
    /// while conn.messages_in_flight() > 0 {
    ///     std::future::poll_fn(|cx| conn.poll_until_drained(&d, cx, &mut out)).await;
    /// }
    /// assert!(out.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn poll_until_drained<S: Send + Sync + 'static, K, B: ReplyBuf>(
        &mut self,
        dispatcher: &Dispatcher<S, K>,
        cx: &mut TaskContext<'_>,
        out: &mut B,
    ) -> Poll<usize> {
        match self.poll_replies(dispatcher, cx, out) {
            Poll::Pending if self.engine.messages_in_flight() == 0 => Poll::Ready(0),
            other => other,
        }
    }

    /// Shares `gate` with the connection's subscriptions (rpcwire's
    /// two-way transports): what a handler subscribes waits for the reply
    /// of its message.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn set_reply_gate(&mut self, gate: Arc<ReplyGate>) {
        self.gate = Some(Arc::clone(&gate));
        self.engine.gate = Some(gate);
    }

    /// The gate given by [`set_reply_gate`](Connection::set_reply_gate).
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn reply_gate(&self) -> Option<Arc<ReplyGate>> {
        self.engine.gate.clone()
    }

    /// How many async calls run or wait to start (notifications included).
    pub fn in_flight(&self) -> usize {
        self.engine.running + self.engine.waiting.len()
    }

    /// How many messages still wait for (part of) their reply.
    pub fn messages_in_flight(&self) -> usize {
        self.engine.messages_in_flight()
    }

    /// What counts against [`Limits::max_in_flight`] on a connection that
    /// reads on while calls run: calls (async notifications included) or
    /// messages in flight, whichever more. An async notification holds no
    /// message slot, and a message with several calls holds one: counted
    /// by either alone, a client could start work or queue input without
    /// bound.
    ///
    /// [`Limits::max_in_flight`]: crate::Limits::max_in_flight
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn slots_in_use(&self) -> usize {
        self.messages_in_flight().max(self.in_flight())
    }

    /// Forgets the task waker the last [`poll_replies`](Connection::poll_replies)
    /// registered, when no call is in flight: the calls the next
    /// [`start`](Connection::start) launches then do not wake the task
    /// (they are polled at its next `poll_replies`). For a transport that
    /// always calls `poll_replies` right after `start`: it saves the task
    /// a poll per message (the wake would come from the task itself).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn forget_waker(&mut self) {
        if self.in_flight() == 0 {
            self.engine.ready.waker.take();
        }
    }

    /// Cancels the running or waiting call whose request id is `id` (its
    /// JSON text, byte for byte): its future is dropped, and its
    /// [`Cancellation`] fires. A single request gets no reply (MCP's
    /// `notifications/cancelled`); an entry of a batch, which must be
    /// answered, gets [`REQUEST_CANCELLED`]. (For a cancellation that
    /// comes as a notification on the connection, such as LSP's
    /// `$/cancelRequest`, see [`DispatcherBuilder::cancel_notification`].)
    /// Returns whether such a call was found.
    pub fn cancel(&mut self, id: &[u8]) -> bool {
        let found = self.engine.cancel(id);
        if found {
            // What it finished (a batch's reply now complete, a single
            // request's end) is written or let go by the next
            // `poll_replies`: a task waiting in one is told, or it waited
            // for the cancelled call's deadline, or for ever.
            self.engine.ready.waker.wake();
        }
        found
    }

    /// Cancels every call running or waiting, answering each single
    /// request in `out` with [`REQUEST_CANCELLED`] and `data` (a JSON
    /// value): for a transport that stops waiting for them. Returns how
    /// many replies were written to `out`; a batch's reply comes out of
    /// [`poll_replies`](Connection::poll_replies).
    #[cfg(feature = "mcp")]
    pub(crate) fn cancel_all_answering<B: ReplyBuf>(&mut self, data: &[u8], out: &mut B) -> usize {
        self.engine.cancel_all_answering(data, out)
    }

    /// Holds `frame` (read past the cap on calls in flight, not started)
    /// at the end of `held`, and carries out at once the cancellation it
    /// asks for, if it is the dispatcher's
    /// [`cancel_notification`](DispatcherBuilder::cancel_notification): for
    /// the transports that hold what a client sends past its cap, where
    /// the notice would otherwise wait behind the very calls it names (for
    /// good, with calls that run until cancelled). The call is cancelled
    /// and answered as [`start`](Connection::start) would (LSP's -32800
    /// written to `out`). The notice itself is held like any message and
    /// started in its turn: its call gone, it only reaches its handler, if
    /// one is registered. A single request still held with the id named,
    /// when no call has it, is taken out of `held` (never started) and
    /// answered as a started one would be: it would otherwise start once a
    /// slot frees and run whole, its notice held behind it (for good at a
    /// cap of one, with calls that run until cancelled). `answers_taken`:
    /// the answers among its items were delivered already
    /// ([`HeldFrame::answers_taken`]).
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn hold<S: Send + Sync + 'static, K, B: ReplyBuf>(
        &mut self,
        dispatcher: &Dispatcher<S, K>,
        frame: Bytes,
        answers_taken: bool,
        held: &mut HeldMessages,
        out: &mut B,
    ) {
        // Read now: its items answer the ids given so far, not those given
        // while it waits.
        self.note_ids_given();
        let frame = HeldFrame {
            frame,
            answers_taken,
            ids_given_below: self.ids_given_below(),
            refused: None,
        };
        let Some(by) = &dispatcher.inner.cancel_by else {
            held.push_back(frame, None);
            return;
        };
        // Its own message, as `start` reads one (nothing else uses the
        // arena between messages).
        self.begin_message();
        let mark = out.len();
        let mut own_id: Option<HeldId> = None;
        let target = match dispatcher
            .inner
            .parser
            .parse_incoming(&frame.frame, &self.arena)
        {
            Ok(Message::Single(item)) => match item.as_entry() {
                Some(entry @ Entry::Request(r))
                    if entry.reply_id().is_none() && r.method() == &*by.method =>
                {
                    r.params().and_then(|p| p.get(&by.id_member))
                }
                Some(Entry::Request(r)) => {
                    // Read once here, so that a notice finds it by a
                    // lookup.
                    own_id = r.id().map(|id| id.as_bytes().into());
                    None
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(target) = target {
            let id = target.as_bytes();
            if self.engine.has_call(id) {
                self.engine.cancel_answering(id, by.reply, out);
            } else if let Some(taken) = held.take(id) {
                // Answered and reported as a started call cancelled would
                // be: within the size limit, and seen by the observer (it
                // was written past both).
                let inner = &dispatcher.inner;
                let id = Id::from_validated(id);
                let outcome = match by.reply {
                    CancelledReply::Nothing => Some(Outcome::Error(REQUEST_CANCELLED)),
                    CancelledReply::Error if inner.single_budget(id).is_some() => {
                        let (_, written) = write_error_reply(
                            out,
                            id,
                            inner.max_response_len,
                            &inner.too_large,
                            REQUEST_CANCELLED,
                            |o| write_error_tail(o, REQUEST_CANCELLED, "Request cancelled", None),
                        );
                        Some(written)
                    }
                    CancelledReply::Error => {
                        // Reported as it is written.
                        inner.refuse_whole(out);
                        None
                    }
                };
                if let (Some(observer), Some(outcome)) = (&inner.observer, outcome) {
                    let method = match inner.parser.parse_incoming(&taken, &self.arena) {
                        Ok(Message::Single(item)) => match item.as_entry() {
                            Some(Entry::Request(r)) => Some(r.method()),
                            _ => None,
                        },
                        _ => None,
                    };
                    inner.report(
                        observer,
                        method,
                        Some(id),
                        outcome,
                        std::time::Instant::now(),
                    );
                }
            }
        }
        if out.len() > mark {
            out.end_reply();
        }
        self.engine.flush_complete(out, self.max_retained);
        self.end_message();
        held.push_back(frame, own_id);
    }
}

/// What a single request cancelled by a
/// [`cancel_notification`](DispatcherBuilder::cancel_notification) is
/// answered with (an entry of a batch, which must be answered, always gets
/// [`REQUEST_CANCELLED`]).
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelledReply {
    /// Nothing: MCP's `notifications/cancelled` (the client no longer
    /// waits for it).
    Nothing,
    /// The error [`REQUEST_CANCELLED`] (-32800, "Request cancelled"):
    /// LSP's `$/cancelRequest`.
    Error,
}

/// The notification that cancels calls (see
/// [`DispatcherBuilder::cancel_notification`]).
#[derive(Clone, Debug)]
pub(crate) struct CancelBy {
    method: Box<str>,
    id_member: Box<str>,
    reply: CancelledReply,
}

impl CancelBy {
    /// The same notification, as this side sends it for its own requests.
    pub(crate) fn notice(&self, reason_member: Option<Box<str>>) -> crate::peer::CancelNotice {
        crate::peer::CancelNotice {
            method: self.method.clone(),
            id_member: self.id_member.clone(),
            reason_member,
        }
    }
}

/// What an async handler receives; all of it owned, so the future can be
/// `'static`.
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub struct AsyncCall<S> {
    /// The params; `None` when absent or `null`.
    pub params: Option<OwnedParams>,
    /// The dispatcher's state.
    pub state: Arc<S>,
    /// The connection the request came from.
    pub ctx: Context,
    method: Bytes,
    id: Option<Bytes>,
    cancel: Cancellation,
    deadline: Option<std::time::Instant>,
}

impl<S> AsyncCall<S> {
    /// The method name.
    pub fn method(&self) -> &str {
        // Method names are validated UTF-8 (a slice of the input, or a
        // decoded copy).
        core::str::from_utf8(&self.method).unwrap_or_default()
    }

    /// The request id as JSON text, byte for byte; `None` for a
    /// notification.
    pub fn id(&self) -> Option<&[u8]> {
        self.id.as_deref()
    }

    /// Fires when the call is cancelled (by [`Connection::cancel`] or its
    /// timeout) or dropped with its connection, never when it finishes.
    /// Its future is dropped then anyway; clone this into work the handler
    /// spawned, so that work can stop too (clones see it fire however long
    /// they live).
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancel
    }

    /// When the dispatcher drops this call and answers it as timed out
    /// ([`DispatcherBuilder::timeout`], counted from the request's
    /// arrival, its wait for a slot included); `None` without a timeout.
    /// Where running calls cannot be dropped (no tokio time driver: see
    /// [`DispatcherBuilder::timeout`]) it is still given, as the time the
    /// call was allowed.
    /// A handler that passes the call on (a proxy) can give the next hop
    /// only what is left, and tell its future dropped at the deadline from
    /// one dropped because its client left (the [`cancellation`](Self::cancellation)
    /// fires for both).
    ///
    /// ```
    /// # use rpcwire::dispatch::AsyncCall;
    /// async fn budget(call: AsyncCall<()>) -> Result<u64, rpcwire::RpcError> {
    ///     let left = call
    ///         .deadline()
    ///         .map(|d| d.saturating_duration_since(std::time::Instant::now()));
    ///     Ok(left.map_or(u64::MAX, |d| d.as_millis() as u64))
    /// }
    /// ```
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline
    }

    /// Decodes the params into an owned `T`, read as for
    /// [`Call::decode`](crate::Call::decode) (absent params as `[]`, but an
    /// `Option` as the whole params is `None` and a map is empty; `()`
    /// takes `[]`; a tuple's missing trailing values read as `null`); a
    /// failure is -32602 with the reason and the byte offset in the
    /// message in `data`.
    ///
    /// For types that borrow (`&'a str` fields), see
    /// [`decode_in`](Self::decode_in).
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, RpcError> {
        match &self.params {
            Some(p) => p.decode(),
            None => crate::de::absent().map_err(|e| super::call::params_error(&e, None)),
        }
    }

    /// Decodes the params into a `T` that borrows from them (`&'a str`
    /// fields), strings with escapes lent from `arena`, an arena the
    /// future owns; read as [`decode`](Self::decode) reads them, absent
    /// params included, with the same errors.
    ///
    /// ```
    /// # use rpcwire::dispatch::AsyncCall;
    /// #[derive(serde::Deserialize)]
    /// struct Args<'a> { #[serde(borrow)] name: &'a str }
    /// async fn hello(call: AsyncCall<()>) -> Result<String, rpcwire::RpcError> {
    ///     let arena = rpcwire::bumpalo::Bump::new();
    ///     let args: Args<'_> = call.decode_in(&arena)?;
    ///     Ok(format!("hello, {}", args.name))
    /// }
    /// ```
    pub fn decode_in<'a, T: serde::Deserialize<'a>>(
        &'a self,
        arena: &'a bumpalo::Bump,
    ) -> Result<T, RpcError> {
        match &self.params {
            Some(p) => p.decode_in(arena),
            None => crate::de::absent().map_err(|e| super::call::params_error(&e, None)),
        }
    }
}

/// The params of an async call: a validated array or object, as a
/// reference-counted slice of the input message. Equal when their JSON
/// text is.
#[derive(Clone, Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub struct OwnedParams {
    json: Bytes,
    /// Where the params start in their message, for the offsets of
    /// decoding errors.
    offset: Option<usize>,
}

impl PartialEq for OwnedParams {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

impl Eq for OwnedParams {}

impl OwnedParams {
    /// The params `part` of the message `input` (a slice of it, shared).
    fn of(input: &Bytes, part: &[u8]) -> OwnedParams {
        let offset = input
            .as_ptr_range()
            .contains(&part.as_ptr())
            .then(|| part.as_ptr() as usize - input.as_ptr() as usize);
        OwnedParams {
            json: share(input, part),
            offset,
        }
    }

    /// A borrowed view, for positional and named access.
    pub fn view(&self) -> Params<'_> {
        Params::from_validated(&self.json)
    }

    /// The raw JSON (a slice of the input, not a copy).
    pub fn as_bytes(&self) -> &Bytes {
        &self.json
    }

    /// Decodes into an owned `T`; a failure is -32602 with serde's reason
    /// and the byte offset in the message in `data`, as
    /// [`Call::decode`](crate::Call::decode) gives them.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, RpcError> {
        crate::de::from_slice(&self.json).map_err(|e| self.error(&e))
    }

    /// Decodes into a `T` that borrows from these params, strings with
    /// escapes lent from `arena`; a failure as for
    /// [`decode`](OwnedParams::decode).
    pub fn decode_in<'a, T: serde::Deserialize<'a>>(
        &'a self,
        arena: &'a bumpalo::Bump,
    ) -> Result<T, RpcError> {
        crate::de::from_slice_in(&self.json, arena).map_err(|e| self.error(&e))
    }

    fn error(&self, e: &serde_json::Error) -> RpcError {
        let at = self
            .offset
            .map(|base| base + crate::de::error_offset(&self.json, e));
        super::call::params_error(e, at)
    }
}

/// The cancellation signal of one async call: it fires when the call is
/// cancelled ([`Connection::cancel`](crate::Connection::cancel), a batch
/// entry's cancellation), times out, or is dropped with its connection;
/// never when the call finishes. Clones (kept by work the handler spawned)
/// see it fire however long they live.
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub struct Cancellation {
    state: Arc<CancelState>,
}

/// One call's cancellation flag and the waker of whoever awaits it. A
/// slot reuses its state for the next call when nobody else holds it (no
/// allocation per call), and makes a new one when a clone outlives its
/// call.
#[derive(Default)]
struct CancelState {
    cancelled: std::sync::atomic::AtomicBool,
    waker: AtomicWaker,
}

impl CancelState {
    fn fire(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.waker.wake();
    }
}

impl Cancellation {
    /// Whether the call was cancelled (or timed out).
    pub fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Ordering::Acquire)
    }

    /// Completes when the call is cancelled.
    pub async fn cancelled(&self) {
        std::future::poll_fn(|cx| {
            if self.is_cancelled() {
                return Poll::Ready(());
            }
            self.state.waker.register(cx.waker());
            if self.is_cancelled() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

impl std::fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancellation")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// A slot's waker: made once per slot, reused by every call that runs in
/// it.
struct SlotShared {
    index: usize,
    ready: Arc<ReadyList>,
    /// On the ready list, not polled since: woken again, it is not listed
    /// again. (Each wake was listed, and a call woken k times between two
    /// polls of the engine was polled k times: a `join_all` of n pending
    /// children, woken by k of them, polled its children k * n times.)
    listed: AtomicBool,
}

impl Wake for SlotShared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.listed.swap(true, Ordering::AcqRel) {
            self.ready.push(self.index);
        }
    }
}

/// The slots woken since the engine last looked, and the engine's own waker.
#[derive(Default)]
struct ReadyList {
    slots: Mutex<Vec<usize>>,
    waker: AtomicWaker,
}

impl ReadyList {
    fn push(&self, index: usize) {
        lock(&self.slots).push(index);
        self.waker.wake();
    }

    /// Swaps the woken list with `into` (empty): no allocation once both
    /// have grown.
    fn take_into(&self, into: &mut Vec<usize>) {
        let mut slots = lock(&self.slots);
        std::mem::swap(&mut *slots, into);
    }
}

/// Wakes the engine's task when the deadline timer fires, through the
/// ready list's waker (the task's latest): the timer is polled once after
/// each reset, not at every poll of the engine.
struct TimerWake {
    fired: AtomicBool,
    ready: Arc<ReadyList>,
}

impl Wake for TimerWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.ready.waker.wake();
    }
}

struct Slot {
    task: Option<Task>,
    /// Wakes the engine for this slot (its `shared`).
    waker: Waker,
    shared: Arc<SlotShared>,
    /// The running call's cancellation state (the last call's when free).
    cancel: Arc<CancelState>,
}

impl Drop for Slot {
    /// A call dropped with its connection is cancelled: work it spawned
    /// hears of it.
    fn drop(&mut self) {
        if self.task.is_some() {
            self.cancel.fire();
        }
    }
}

/// Which reply of which message a call answers; `None` for a notification.
type Target = Option<(usize, usize)>;

/// A running call.
struct Task {
    call: HandlerFuture,
    target: Target,
    /// The request id, for cancellation by id.
    id: Option<Bytes>,
    method: Bytes,
    deadline: Option<Instant>,
    started: std::time::Instant,
    /// Subscriptions its handler code opened, settled when it is answered
    /// (closed if it never is).
    subs: Vec<u128>,
}

/// A call's future, with [`DispatcherBuilder::quiet_panics`] for its drop.
struct HandlerFuture {
    fut: Pin<Box<dyn PendingCall>>,
    quiet: bool,
}

/// What is left of a call whose future was dropped.
struct Dropped;

impl PendingCall for Dropped {
    fn poll_reply(
        self: Pin<&mut Self>,
        _: &mut TaskContext<'_>,
        _: Sink<'_>,
        _: usize,
    ) -> Poll<Result<Done, RpcError>> {
        Poll::Pending
    }

    fn answered(&self, _: Outcome) {}
}

impl Drop for HandlerFuture {
    /// A call ended before it finished (past its deadline, cancelled, its
    /// message abandoned) drops its future here, running the drops of what
    /// the handler's code held: a panic there is the handler's, kept from
    /// the connection's task as its polls' are (a future owning a runtime
    /// panics when dropped in an async context). (`Dropped` is a ZST: its
    /// box does not allocate.)
    fn drop(&mut self) {
        let fut = std::mem::replace(&mut self.fut, Box::pin(Dropped));
        let _ = super::catch_handler_panic(self.quiet, move || drop(fut));
    }
}

/// An async entry waiting for a free slot.
pub(crate) struct Waiting {
    target: Target,
    method: Bytes,
    id: Option<Bytes>,
    params: Option<OwnedParams>,
    /// When it was queued for a slot: its deadline counts from then, and
    /// so does the `elapsed` reported of it if it is answered without
    /// running (timed out or cancelled while it waits).
    queued: Option<Instant>,
}

/// One reply of a message in flight.
enum ReplyState {
    /// Not decided yet; the id's range in the message.
    Pending(Range<usize>),
    /// Decided out of order: its bytes in the message's staging buffer.
    Staged(Range<usize>),
    /// Written in order (or, for a cancelled single request, never).
    Written,
}

/// A message whose reply is not complete.
struct Msg {
    input: Bytes,
    batch: bool,
    budget: Budget,
    too_large: TooLarge,
    replies: Vec<ReplyState>,
    /// The first reply not yet written in order.
    next: usize,
    /// A batch's reply so far, in request order, from its `[`. A single
    /// reply goes straight to the caller's buffer instead.
    buf: Vec<u8>,
    /// Replies decided before their turn.
    stage: Vec<u8>,
    /// Every entry of the message has been read (replies may still run).
    sealed: bool,
    /// Its number in the connection's [`ReplyGate`] (0: no gate).
    seq: u64,
}

impl Msg {
    fn id(&self, k: usize) -> Id<'_> {
        match &self.replies[k] {
            ReplyState::Pending(r) => id_at(&self.input, r),
            _ => Id::NULL,
        }
    }

    /// Decides reply `k` now with `write` (which must be ready); see
    /// [`poll_batch_entry`](Msg::poll_batch_entry), `running` included.
    fn decide_batch_entry(
        &mut self,
        k: usize,
        running: bool,
        write: impl FnOnce(&mut Vec<u8>, Id<'_>, usize, &TooLarge) -> (usize, Outcome),
    ) {
        let _ = self.poll_batch_entry(k, running, |into, id, allowance, too_large| {
            Poll::Ready(write(into, id, allowance, too_large))
        });
    }

    /// Writes reply `k` with `write`, in at most its allowance: into the
    /// batch's reply if it is its turn, else into the staging buffer; then
    /// moves every staged reply whose turn has come. If the batch is already
    /// past the size limit, the too-large reply is written instead and
    /// `write` is not called, unless the entry's call is `running`: it
    /// ran (a transaction sent, say), and its reply is kept if it fits the
    /// room held for it. Returns whether the reply was decided (`false`
    /// when `write` is pending; then nothing was written).
    fn poll_batch_entry(
        &mut self,
        k: usize,
        running: bool,
        write: impl FnOnce(&mut Vec<u8>, Id<'_>, usize, &TooLarge) -> Poll<(usize, Outcome)>,
    ) -> bool {
        let ReplyState::Pending(id_range) = &self.replies[k] else {
            return true;
        };
        let input = self.input.clone();
        let id = id_at(&input, id_range);
        let too_large_len = self.too_large.len_for(id);
        let allowance = self.budget.allowance(too_large_len);
        let in_order = k == self.next;
        let mut target = std::mem::take(if in_order {
            &mut self.buf
        } else {
            &mut self.stage
        });
        let mark = target.len();
        // The buffers never need more than the limit: grow them within it.
        super::reply::grow_within(&mut target, too_large_len + 1, self.budget.limit());
        if in_order {
            target.push(if mark == 0 { b'[' } else { b',' });
        }
        let at = target.len();
        let outcome = if self.budget.is_over() && !running {
            self.too_large.write(&mut target, id);
            Poll::Ready((too_large_len, Outcome::TooLarge))
        } else {
            write(&mut target, id, allowance, &self.too_large)
        };
        let decided = match outcome {
            Poll::Pending => {
                target.truncate(mark);
                None
            }
            Poll::Ready(written) => Some(written),
        };
        if in_order {
            self.buf = target;
        } else {
            self.stage = target;
        }
        let Some((len, outcome)) = decided else {
            return false;
        };
        if in_order {
            self.replies[k] = ReplyState::Written;
            self.next += 1;
        } else {
            self.replies[k] = ReplyState::Staged(at..at + len);
        }
        self.budget.commit(too_large_len, len, outcome);
        self.advance();
        true
    }

    /// Writes the staged replies whose turn has come.
    fn advance(&mut self) {
        while let Some(ReplyState::Staged(r)) = self.replies.get(self.next) {
            let r = r.clone();
            super::reply::grow_within(&mut self.buf, r.len() + 2, self.budget.limit());
            self.buf.push(if self.buf.is_empty() { b'[' } else { b',' });
            self.buf.extend_from_slice(&self.stage[r]);
            self.replies[self.next] = ReplyState::Written;
            self.next += 1;
        }
    }

    fn is_complete(&self) -> bool {
        self.sealed && self.next == self.replies.len()
    }
}

/// Bytes of reply lists a connection keeps whatever its `max_retained`.
const KEPT_REPLY_LISTS_FLOOR: usize = 1024;

/// A connection's running calls; see the module docs.
pub(crate) struct Engine {
    slots: Vec<Slot>,
    free: Vec<usize>,
    pub(crate) running: usize,
    pub(crate) waiting: VecDeque<Waiting>,
    msgs: Vec<Option<Msg>>,
    free_msgs: Vec<usize>,
    ready: Arc<ReadyList>,
    woken: Vec<usize>,
    buffers: Vec<Vec<u8>>,
    /// Reply lists (one entry a request) kept for the next messages,
    /// within `max_retained` bytes, or [`KEPT_REPLY_LISTS_FLOOR`].
    reply_lists: Vec<Vec<ReplyState>>,
    /// The entries `reply_lists` have room for, together.
    reply_list_room: usize,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The deadline `timer` is set for, while that is a call's.
    timer_at: Option<Instant>,
    /// What `timer` wakes, and whether it was polled since it was last set.
    timer_wake: Option<(Arc<TimerWake>, Waker)>,
    timer_polled: bool,
    /// The runtime has no time driver (built without `enable_time`): as
    /// outside a runtime, no call times out.
    no_timers: bool,
    /// The message being started was held at the in-flight limit after
    /// its answers were delivered ([`Connection::take_answers_at_limit`]):
    /// they are not delivered again.
    pub(crate) answers_taken: bool,
    /// Where `out` ended when the single message being started was answered
    /// by an async call ready at once: its reply is ended already.
    ended_at: Option<usize>,
    /// Shared with the connection's subscriptions (rpcwire's WebSocket and
    /// stream transports): which messages still wait for their reply.
    pub(crate) gate: Option<Arc<ReplyGate>>,
    /// Calls cancelled by id since the dispatcher last polled: reported to
    /// its observer then (the engine has none).
    cancelled: Vec<Cancelled>,
}

/// A call cancelled by id, to be reported.
struct Cancelled {
    method: Bytes,
    id: Option<Bytes>,
    started: std::time::Instant,
}

/// Which of a connection's messages still wait for their reply, and which
/// reply the handler code running now answers: a subscription opened by a
/// handler of a message answered later (a batch beside a running async
/// call, an async handler that awaits after subscribing) holds its
/// notifications until that reply is written, so that the client learns
/// the subscription's id first, as geth does.
///
/// A subscription is also kept only if its id can reach the client: the
/// ones handler code opens are *fresh* until the dispatcher settles them
/// with how that handler's entry was answered. A result keeps them; an
/// error in its place (the handler's own, a panic, the too-large error, a
/// timeout, a cancellation) closes them, and so does a reply that is never
/// written (its message abandoned, its call dropped with the connection's
/// state). A handler that subscribes nothing costs a thread-local mark
/// and one flag read.
///
/// Only messages whose reply is deferred are numbered (those with async
/// calls); a message answered at once needs nothing held.
#[derive(Default)]
pub(crate) struct ReplyGate {
    next: std::sync::atomic::AtomicU64,
    /// Deferred messages not answered yet.
    open: Mutex<Vec<u64>>,
    /// Subscriptions opened by handler code and not settled yet.
    fresh: Mutex<Vec<u128>>,
    /// `fresh` is not empty (stored under its lock; read without it by the
    /// thread that runs the handler code, which also stored it).
    has_fresh: AtomicBool,
    /// The connection's subscriptions, which close what is not kept.
    registry: std::sync::OnceLock<std::sync::Weak<dyn Unanswered>>,
}

/// What closes the subscriptions whose id did not reach their client (the
/// connection's subscription registry).
pub(crate) trait Unanswered: Send + Sync {
    /// Closes subscription `id`: its queue is dropped, its sink reports it
    /// closed, its place is free.
    fn close(&self, id: u128);
    /// Closes every subscription still held for deferred message `seq`:
    /// its reply will not be written.
    fn close_held(&self, seq: u64);
}

thread_local! {
    /// The handler code running on this thread: its connection's gate (by
    /// address; 0: none) and the reply it answers ([`ReplyGate::current`]).
    /// Thread-local, so that a task running elsewhere meanwhile (one a
    /// handler spawned) is never taken for the handler.
    static RUNNING: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// The mark of handler code of an entry answered at once (not deferred).
const AT_ONCE: u64 = u64::MAX;

/// The mark [`ReplyGate::enter`] replaced, put back when this is dropped:
/// also when a panic unwinds through the marked code (an observer's, which
/// is not caught there), so that no stale mark outlives it on the thread.
#[must_use]
pub(crate) struct Outer((usize, u64));

impl Drop for Outer {
    fn drop(&mut self) {
        RUNNING.set(self.0);
    }
}

impl ReplyGate {
    fn key(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Whether handler code of this connection answering a request runs
    /// now on this thread, and for which deferred message: `Some(0)` for a
    /// reply written at once, `Some(seq)` for deferred message `seq`.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn current(&self) -> Option<u64> {
        match RUNNING.get() {
            (gate, AT_ONCE) if gate == self.key() => Some(0),
            (gate, seq) if gate == self.key() && seq != 0 => Some(seq),
            _ => None,
        }
    }

    /// Whether deferred message `seq` has been answered (its reply is in
    /// the transport's output).
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn is_answered(&self, seq: u64) -> bool {
        !lock(&self.open).contains(&seq)
    }

    /// Tells the gate which registry closes the subscriptions not kept.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn set_registry(&self, registry: std::sync::Weak<dyn Unanswered>) {
        let _ = self.registry.set(registry);
    }

    /// Records subscription `id`, just opened by the handler code running
    /// now, as fresh.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    pub(crate) fn opened(&self, id: u128) {
        let mut fresh = lock(&self.fresh);
        fresh.push(id);
        self.has_fresh.store(true, Ordering::Relaxed);
    }

    fn open(&self) -> u64 {
        let seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.open).push(seq);
        seq
    }

    fn answered(&self, seq: u64) {
        lock(&self.open).retain(|&s| s != seq);
    }

    /// Marks handler code of deferred message `seq` (0: of no reply, a
    /// notification) as running on this thread; returns what was marked
    /// before, put back when it is dropped.
    fn enter(&self, seq: u64) -> Outer {
        Outer(RUNNING.replace((self.key(), seq)))
    }

    /// Whether handler code opened subscriptions not settled yet.
    #[inline]
    fn has_fresh(&self) -> bool {
        self.has_fresh.load(Ordering::Relaxed)
    }

    /// Moves the fresh subscriptions to `into` (a call still running: they
    /// are settled when it is answered).
    fn take_fresh(&self, into: &mut Vec<u128>) {
        let mut fresh = lock(&self.fresh);
        into.append(&mut fresh);
        self.has_fresh.store(false, Ordering::Relaxed);
    }

    /// Settles the fresh subscriptions: kept, or closed.
    #[cold]
    fn settle_fresh(&self, kept: bool) {
        let mut ids = Vec::new();
        self.take_fresh(&mut ids);
        self.settle(&ids, kept);
    }

    /// Settles subscriptions `ids`: kept (nothing to do: those of a deferred
    /// message stay held until its reply is written), or closed.
    fn settle(&self, ids: &[u128], kept: bool) {
        if kept || ids.is_empty() {
            return;
        }
        if let Some(registry) = self.registry.get().and_then(std::sync::Weak::upgrade) {
            for &id in ids {
                registry.close(id);
            }
        }
    }

    /// Closes what handler code subscribed for deferred message `seq`,
    /// whose reply will not be written.
    fn abandoned(&self, seq: u64) {
        self.answered(seq);
        // 0 is no message: every subscription not held has it.
        if seq != 0
            && let Some(registry) = self.registry.get().and_then(std::sync::Weak::upgrade)
        {
            registry.close_held(seq);
        }
    }

    /// Runs `answer`, handler code of a request whose reply it writes:
    /// marked as answered at once unless it runs for a deferred message
    /// (a batch's synchronous entry); then what it subscribed is kept if
    /// `kept` says its reply carries a result, closed otherwise.
    #[inline]
    pub(crate) fn answering<R>(
        &self,
        answer: impl FnOnce() -> R,
        kept: impl FnOnce(&R) -> bool,
    ) -> R {
        let outer = RUNNING.get();
        let deferred = outer.0 == self.key() && outer.1 != 0;
        let mark = (!deferred).then(|| self.enter(AT_ONCE));
        let r = answer();
        drop(mark);
        if self.has_fresh() {
            self.settle_fresh(kept(&r));
        }
        r
    }

    /// After handler code that answers no request (a notification): what
    /// it subscribed is kept, and not taken for the next entry's.
    #[inline]
    pub(crate) fn keep_fresh(&self) {
        if self.has_fresh() {
            self.settle_fresh(true);
        }
    }
}

impl Drop for Engine {
    /// Calls and messages dropped with the connection's state (a transport
    /// giving up on them at shutdown) will never be answered: what their
    /// handlers subscribed is closed.
    fn drop(&mut self) {
        let Some(gate) = &self.gate else {
            return;
        };
        for task in self.slots.iter().filter_map(|s| s.task.as_ref()) {
            gate.settle(&task.subs, false);
        }
        for msg in self.msgs.iter().flatten() {
            gate.abandoned(msg.seq);
        }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine {
            slots: Vec::new(),
            free: Vec::new(),
            running: 0,
            waiting: VecDeque::new(),
            msgs: Vec::new(),
            free_msgs: Vec::new(),
            ready: Arc::new(ReadyList::default()),
            woken: Vec::new(),
            buffers: Vec::new(),
            reply_lists: Vec::new(),
            reply_list_room: 0,
            timer: None,
            timer_at: None,
            timer_wake: None,
            timer_polled: false,
            no_timers: false,
            answers_taken: false,
            ended_at: None,
            gate: None,
            cancelled: Vec::new(),
        }
    }
}

impl Engine {
    pub(crate) fn messages_in_flight(&self) -> usize {
        self.msgs.len() - self.free_msgs.len()
    }

    fn open_message(
        &mut self,
        input: &Bytes,
        batch: bool,
        budget: Budget,
        too_large: &TooLarge,
    ) -> usize {
        let msg = Msg {
            input: input.clone(),
            batch,
            budget,
            too_large: too_large.clone(),
            replies: self.reply_lists.pop().map_or_else(Vec::new, |list| {
                self.reply_list_room -= list.capacity();
                list
            }),
            next: 0,
            buf: self.buffers.pop().unwrap_or_default(),
            stage: self.buffers.pop().unwrap_or_default(),
            sealed: false,
            seq: self.gate.as_ref().map_or(0, |g| g.open()),
        };
        match self.free_msgs.pop() {
            Some(m) => {
                self.msgs[m] = Some(msg);
                m
            }
            None => {
                self.msgs.push(Some(msg));
                self.msgs.len() - 1
            }
        }
    }

    /// Marks the handler code about to run as message `m`'s (none for
    /// `None`, a notification) until what it returns is dropped.
    #[inline]
    fn enter(&self, m: Option<usize>) -> Option<Outer> {
        let gate = self.gate.as_ref()?;
        let seq = m
            .and_then(|m| self.msgs[m].as_ref())
            .map_or(0, |msg| msg.seq);
        Some(gate.enter(seq))
    }

    /// Writes every complete message's reply to `out` and frees it; returns
    /// how many replies were written. Its buffers are kept for the next
    /// message while all kept buffers together hold at most `max_retained`
    /// bytes ([`Connection::max_retained`]); larger ones are given back.
    fn flush_complete<B: ReplyBuf>(&mut self, out: &mut B, max_retained: usize) -> usize {
        let mut written = 0;
        for m in 0..self.msgs.len() {
            if !self.msgs[m].as_ref().is_some_and(Msg::is_complete) {
                continue;
            }
            let mut msg = self.msgs[m].take().expect("checked above");
            if let Some(gate) = &self.gate {
                // Its reply is in `out` by the end of this turn: what its
                // handlers subscribed may be written after it.
                gate.answered(msg.seq);
            }
            if msg.batch && !msg.buf.is_empty() {
                super::reply::grow_within(&mut msg.buf, 1, msg.budget.limit());
                msg.buf.push(b']');
                match out.as_vec_mut() {
                    // The batch reply becomes the output as it is: no copy.
                    Some(v) if v.is_empty() => std::mem::swap(v, &mut msg.buf),
                    _ => out.extend_from_slice(&msg.buf),
                }
                out.end_reply();
                written += 1;
            }
            self.free_msgs.push(m);
            self.recycle(msg, max_retained);
        }
        written
    }

    /// Keeps a freed message's buffers for the next message while all kept
    /// buffers together hold at most `max_retained` bytes.
    fn recycle(&mut self, msg: Msg, max_retained: usize) {
        for mut buf in [msg.buf, msg.stage] {
            // One batch with a large reply must not pin its buffers (up
            // to twice the response limit) for the life of the
            // connection.
            let kept: usize = self.buffers.iter().map(Vec::capacity).sum();
            if kept + buf.capacity() > max_retained {
                continue;
            }
            buf.clear();
            self.buffers.push(buf);
        }
        // The reply lists too (a burst of large batches kept one per
        // message in flight, for good: megabytes at the transports' caps).
        // A floor, so that a connection that keeps nothing else still
        // keeps a single request's list (it would be allocated again for
        // every message).
        let mut replies = msg.replies;
        let room = self.reply_list_room + replies.capacity();
        if room * std::mem::size_of::<ReplyState>() <= max_retained.max(KEPT_REPLY_LISTS_FLOOR) {
            replies.clear();
            self.reply_list_room = room;
            self.reply_lists.push(replies);
        }
    }

    /// Drops every message still waiting for its reply, with the calls
    /// running or queued for them (a running one's cancellation fires);
    /// notifications keep running.
    fn abandon_messages(&mut self, max_retained: usize) {
        for index in 0..self.slots.len() {
            if self.slots[index]
                .task
                .as_ref()
                .is_some_and(|t| t.target.is_some())
            {
                drop(self.free_slot(index, true));
            }
        }
        self.waiting.retain(|w| w.target.is_none());
        for m in 0..self.msgs.len() {
            if let Some(msg) = self.msgs[m].take() {
                if let Some(gate) = &self.gate {
                    gate.abandoned(msg.seq);
                }
                self.free_msgs.push(m);
                self.recycle(msg, max_retained);
            }
        }
    }

    /// Gives back the kept reply buffers past `keep` bytes in all (for a
    /// transport whose connection idles with nothing in flight).
    #[cfg(feature = "server")]
    pub(crate) fn release_buffers(&mut self, keep: usize) {
        let mut kept = 0;
        self.buffers.retain(|buf| {
            kept += buf.capacity();
            kept <= keep
        });
        let mut room = 0;
        self.reply_lists.retain(|list| {
            let kept = (room + list.capacity()) * std::mem::size_of::<ReplyState>()
                <= keep.max(KEPT_REPLY_LISTS_FLOOR);
            if kept {
                room += list.capacity();
            }
            kept
        });
        self.reply_list_room = room;
        // The queue of calls that waited for a slot, and the list of calls
        // cancelled by id, past `keep` bytes each: a batch of 1,000 async
        // calls left about 150 kB of places.
        if self.waiting.is_empty() && self.waiting.capacity() * size_of::<Waiting>() > keep {
            self.waiting = VecDeque::new();
        }
        if self.cancelled.is_empty() && self.cancelled.capacity() * size_of::<Cancelled>() > keep {
            self.cancelled = Vec::new();
        }
    }

    /// Whether a running or waiting call has request id `id`.
    fn has_call(&self, id: &[u8]) -> bool {
        self.slots
            .iter()
            .any(|s| s.task.as_ref().is_some_and(|t| t.id.as_deref() == Some(id)))
            || self.waiting.iter().any(|w| w.id.as_deref() == Some(id))
    }

    fn cancel(&mut self, id: &[u8]) -> bool {
        let Some((target, running)) = self.take_call(id) else {
            return false;
        };
        if let Some((m, k)) = target {
            self.cancelled_reply(m, k, running);
        }
        true
    }

    /// Cancels every call running or waiting for a slot (their
    /// cancellations fire), each single request answered in `out` with
    /// [`REQUEST_CANCELLED`] and `data`, a batch's entries in its reply;
    /// returns how many replies were written to `out`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))] // for MCP's stdio
    fn cancel_all_answering<B: ReplyBuf>(&mut self, data: &[u8], out: &mut B) -> usize {
        let ids: Vec<Bytes> = (self.slots.iter())
            .filter_map(|s| s.task.as_ref()?.id.clone())
            .chain(self.waiting.iter().filter_map(|w| w.id.clone()))
            .collect();
        let mut written = 0;
        for id in ids {
            let Some((Some((m, k)), running)) = self.take_call(&id) else {
                continue;
            };
            let msg = self.msgs[m].as_mut().expect("a call's message is live");
            if msg.batch {
                self.cancelled_reply(m, k, running);
                continue;
            }
            write_single_error(msg, k, out, REQUEST_CANCELLED, |o| {
                write_error_tail(o, REQUEST_CANCELLED, "Request cancelled", Some(data))
            });
            out.end_reply();
            written += 1;
        }
        written
    }

    /// Cancels the call with request id `id` as [`cancel`](Self::cancel)
    /// does, but answers a single request with [`REQUEST_CANCELLED`] in
    /// `out` when `reply` says so (its end is marked by the caller, as the
    /// reply of the message being started). Returns the replies written.
    fn cancel_answering<B: ReplyBuf>(
        &mut self,
        id: &[u8],
        reply: CancelledReply,
        out: &mut B,
    ) -> usize {
        let Some((Some((m, k)), running)) = self.take_call(id) else {
            return 0;
        };
        let single = self.msgs[m].as_ref().is_some_and(|msg| !msg.batch);
        if !single || reply == CancelledReply::Nothing {
            self.cancelled_reply(m, k, running);
            return 0;
        }
        let msg = self.msgs[m].as_mut().expect("a call's message is live");
        write_single_error(msg, k, out, REQUEST_CANCELLED, |o| {
            write_error_tail(o, REQUEST_CANCELLED, "Request cancelled", None)
        });
        1
    }

    /// Takes the running or waiting call with request id `id` out of the
    /// engine (a running one's cancellation fires): its reply's place and
    /// whether it was running (not queued), or `None` when there is no
    /// such call.
    fn take_call(&mut self, id: &[u8]) -> Option<(Target, bool)> {
        let found = self
            .slots
            .iter()
            .position(|s| s.task.as_ref().is_some_and(|t| t.id.as_deref() == Some(id)));
        let target = if let Some(index) = found {
            let task = self.free_slot(index, true);
            if !self.waiting.is_empty() {
                // Its slot is the queue's front's: started by the next poll.
                self.ready.waker.wake();
            }
            task.call.fut.answered(Outcome::Error(REQUEST_CANCELLED));
            self.cancelled.push(Cancelled {
                method: task.method,
                id: task.id,
                started: task.started,
            });
            (task.target, true)
        } else if let Some(at) = self
            .waiting
            .iter()
            .position(|w| w.id.as_deref() == Some(id))
        {
            let waiting = self.waiting.remove(at).expect("found above");
            self.cancelled.push(Cancelled {
                method: waiting.method,
                id: waiting.id,
                // Its wait is its latency (it never started).
                started: waiting
                    .queued
                    .map_or_else(std::time::Instant::now, Instant::into_std),
            });
            (waiting.target, false)
        } else {
            return None;
        };
        Some(target)
    }

    /// A cancelled request: a single one gets no reply; a batch entry gets
    /// the cancellation error (even past the size limit when its call was
    /// `running`: it may have done part of its work).
    fn cancelled_reply(&mut self, m: usize, k: usize, running: bool) {
        let Some(msg) = self.msgs[m].as_mut() else {
            return;
        };
        if !msg.batch {
            msg.replies[k] = ReplyState::Written;
            msg.next = msg.replies.len();
            return;
        }
        msg.decide_batch_entry(k, running, |into, id, allowance, too_large| {
            write_error_reply(into, id, allowance, too_large, REQUEST_CANCELLED, |o| {
                write_error_tail(o, REQUEST_CANCELLED, "Request cancelled", None)
            })
        });
    }

    /// Takes the call out of slot `index` and frees the slot; fires the
    /// call's cancellation signal when it was `cancelled` (or timed out),
    /// not when it finished.
    fn free_slot(&mut self, index: usize, cancelled: bool) -> Task {
        let task = self.slots[index].task.take().expect("a running slot");
        if cancelled {
            self.slots[index].cancel.fire();
            // Answered with an error, or not at all: what it subscribed
            // has no client.
            if let Some(gate) = &self.gate {
                gate.settle(&task.subs, false);
            }
        }
        self.free.push(index);
        self.running -= 1;
        task
    }

    /// Makes the timer fire no later than `deadline`, a call's launched
    /// at `now`. Left alone when it is set for an earlier deadline, even
    /// one past: the later ones are found when it fires (moving a timer
    /// that fired and is not yet handled would keep the calls it was set
    /// for running until the new deadline; a timer left from calls that
    /// have all ended costs one scan, which sets it anew). Without a
    /// runtime with timers there is no timer, and no call times out.
    fn cover(&mut self, deadline: Instant) {
        if self.timer_at.is_some_and(|at| at <= deadline) {
            return;
        }
        match self.timer.as_mut() {
            Some(timer) => timer.as_mut().reset(deadline),
            None if !self.no_timers && tokio::runtime::Handle::try_current().is_ok() => {
                // In a runtime built without its time driver, tokio panics
                // here (and offers no way to ask first): caught once per
                // connection (the hook prints tokio's advice to call
                // `enable_time`), then calls run without deadlines, as
                // outside a runtime, instead of the caller's task dying.
                let Ok(sleep) = catch_unwind(|| tokio::time::sleep_until(deadline)) else {
                    self.no_timers = true;
                    return;
                };
                self.timer = Some(Box::pin(sleep));
                let wake = Arc::new(TimerWake {
                    fired: AtomicBool::new(false),
                    ready: Arc::clone(&self.ready),
                });
                self.timer_wake = Some((Arc::clone(&wake), Waker::from(wake)));
            }
            None => return,
        }
        self.timer_at = Some(deadline);
        self.timer_polled = false;
    }

    /// Makes the timer fire no later than the deadline of the call at the
    /// front of the queue, the earliest of the queued calls' (they count
    /// from arrival, and the queue is in arrival order). The running
    /// calls' deadlines alone did not do while a call that arrived later
    /// could run first (see [`launch_unpolled`](Shared::launch_unpolled)): a queued call
    /// whose deadline came before all of theirs was answered only when
    /// something else woke the task. With calls started in arrival order
    /// the running calls' deadlines come first; this keeps the queue's
    /// timing from resting on that.
    fn cover_front(&mut self, timeout: std::time::Duration, cx: &mut TaskContext<'_>) {
        let Some(deadline) = self
            .waiting
            .front()
            .and_then(|w| w.queued)
            .and_then(|queued| queued.checked_add(timeout))
        else {
            return;
        };
        self.cover(deadline);
        // Polled now that it is set, as `expire` does after a reset, so
        // that it wakes the task: no call's launch follows to poll it.
        if !self.timer_polled && self.timer_fired() {
            cx.waker().wake_by_ref();
        }
    }

    /// Whether the deadline timer has fired: polled (registering its waker)
    /// only after it was set, and after its waker was called.
    fn timer_fired(&mut self) -> bool {
        let (Some(timer), Some((wake, waker))) = (self.timer.as_mut(), self.timer_wake.as_ref())
        else {
            return false;
        };
        if self.timer_polled && !wake.fired.swap(false, Ordering::AcqRel) {
            return false;
        }
        let fired = timer
            .as_mut()
            .poll(&mut TaskContext::from_waker(waker))
            .is_ready();
        self.timer_polled = !fired;
        fired
    }

    /// A free slot's index (a new one if none is free).
    fn slot(&mut self) -> usize {
        if let Some(i) = self.free.pop() {
            return i;
        }
        let index = self.slots.len();
        let shared = Arc::new(SlotShared {
            index,
            ready: Arc::clone(&self.ready),
            listed: AtomicBool::new(false),
        });
        self.slots.push(Slot {
            task: None,
            waker: Waker::from(Arc::clone(&shared)),
            shared,
            cancel: Arc::default(),
        });
        index
    }

    /// The cancellation signal for the call about to run in slot `index`:
    /// the slot's state, cleared, when no clone of the last call's is held
    /// (no allocation); a new one otherwise, so that the old clones keep
    /// what they saw.
    fn fresh_cancellation(&mut self, index: usize) -> Cancellation {
        let slot = &mut self.slots[index];
        if Arc::strong_count(&slot.cancel) == 1 {
            slot.cancel.cancelled.store(false, Ordering::Relaxed);
        } else {
            slot.cancel = Arc::default();
        }
        Cancellation {
            state: Arc::clone(&slot.cancel),
        }
    }
}

/// The range of `part` (a sub-slice of `whole`) in `whole`.
fn range_in(whole: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

/// The reply id at `range` of `input` ([`id_range`]).
fn id_at<'i>(input: &'i [u8], range: &Range<usize>) -> Id<'i> {
    // No id is empty text.
    if range.is_empty() {
        Id::NULL
    } else {
        Id::from_validated(&input[range.clone()])
    }
}

/// Where a batch entry's reply id lies in `input`: empty for `null` given
/// to an invalid entry whose id could not be read, which is not in `input`
/// ([`id_at`] reads an empty range as `null`).
fn id_range(input: &[u8], id: Id<'_>) -> Range<usize> {
    let id = id.as_bytes();
    if input.as_ptr_range().contains(&id.as_ptr()) {
        range_in(input, id)
    } else {
        0..0
    }
}

/// `part` of `input` as a reference-counted slice when it lies in it, else
/// copied (a method name decoded from escapes, in the arena).
fn share(input: &Bytes, part: &[u8]) -> Bytes {
    if input.as_ptr_range().contains(&part.as_ptr()) {
        input.slice_ref(part)
    } else {
        Bytes::copy_from_slice(part)
    }
}

impl<S> Shared<S> {
    /// Gives the connection's peer the protocol's cancellation, for the
    /// requests its handlers send: transports build peers without knowing
    /// the protocol, and every handler runs after a message got here.
    pub(crate) fn teach_peer(&self, conn: &Connection) {
        if let (Some(notice), Some(peer)) = (&self.cancel_notice, conn.context.peer()) {
            peer.learn_cancel_notice(notice);
        }
    }
}

impl<S: Send + Sync + 'static> Shared<S> {
    /// Reads a message: decides what can be decided now, starts or queues
    /// the async entries. With `prefix`, the message is the one at the
    /// front of `input` and its length is written there; a message cut
    /// short or not valid is left alone (nothing written, length 0).
    fn start<B: ReplyBuf>(
        &self,
        input: &Bytes,
        conn: &mut Connection,
        out: &mut B,
        prefix: Option<&mut usize>,
    ) {
        self.teach_peer(conn);
        let message;
        let (parsed, input) = match prefix {
            None => match self.parser.parse_incoming(input, &conn.arena) {
                Ok(m) => (m, input),
                Err(e) => {
                    conn.note_refused(&e);
                    return self.refuse_message(e, input, Some(input), conn, out);
                }
            },
            Some(len) => match self.parser.parse_prefix(input, &conn.arena) {
                Ok(Status::Complete((m, n))) => {
                    *len = n;
                    message = input.slice(..n);
                    (m, &message)
                }
                Ok(Status::Partial) => return,
                Err(e) => {
                    conn.note_refused(&e);
                    return;
                }
            },
        };
        let scope = Scope {
            arena: &conn.arena,
            ctx: &conn.context,
            message: input,
            gate: conn.gate.as_deref(),
        };
        let engine = &mut conn.engine;
        let is_async = |item: &Incoming<'_>| match item {
            Incoming::Request(r) => matches!(self.lookup(r.method()), Some(Handler::Async(_))),
            _ => false,
        };
        let batch = match parsed {
            Message::Single(item) => {
                let Some(entry) = conn.given.entry_of(&item) else {
                    return conn.deliver(Some(input), item);
                };
                // Routed once here (launch routes again, by bytes).
                let is_async = is_async(&item);
                let Some(id) = entry.reply_id() else {
                    if let (Some(by), Entry::Request(r)) = (&self.cancel_by, entry)
                        && r.method() == &*by.method
                        && let Some(target) = r.params().and_then(|p| p.get(&by.id_member))
                    {
                        engine.cancel_answering(target.as_bytes(), by.reply, out);
                    }
                    return match (entry, is_async) {
                        (Entry::Request(r), true) => {
                            let w = waiting(input, r, None);
                            self.start_in_turn(engine, w, scope.ctx, out)
                        }
                        _ => self.notify(entry, scope),
                    };
                };
                let Some((budget, too_large_len)) = self.single_budget(id) else {
                    return self.refuse_whole(out);
                };
                let (Entry::Request(r), true) = (entry, is_async) else {
                    self.answer(&entry, id, scope, out, budget.allowance(too_large_len));
                    return;
                };
                let m = engine.open_message(input, false, budget, &self.too_large);
                let msg = engine.msgs[m].as_mut().expect("just opened");
                msg.replies.push(ReplyState::Pending(id_range(input, id)));
                msg.sealed = true;
                let w = waiting(input, r, Some((m, 0)));
                // In its turn, as a batch entry: what it does before its
                // first `.await` comes before the handlers of the messages
                // read after it (with several in one read, their sync
                // handlers ran first: an LSP request pipelined ahead of
                // `shutdown` saw the server shut down).
                self.start_in_turn(engine, w, scope.ctx, out);
                if engine.msgs[m].as_ref().is_some_and(Msg::is_complete) {
                    // Answered at once, as a sync request: its reply is
                    // in `out` and ended.
                    engine.ended_at = Some(out.len());
                }
                return;
            }
            Message::Batch(batch) => batch,
        };
        let items = batch.as_slice();
        let Some(budget) = self.batch_budget(items, &conn.given) else {
            super::deliver_answers(items, Some(input), conn);
            return self.refuse_whole(out);
        };
        if !items.iter().any(is_async) {
            // Nothing to await: exactly the synchronous path.
            return self.answer_batch(items, budget, input, Some(input), conn, out);
        }
        let m = engine.open_message(input, true, budget, &self.too_large);
        // The batch's sync entries run now, its reply comes later.
        let mut outer = engine.enter(Some(m));
        let mut k = 0;
        for item in items {
            let Some(entry) = conn.given.entry_of(item) else {
                // A response's waiter (`Peer::request_with`) is no handler
                // code of this batch: what it subscribes must not be kept
                // or closed with how an entry here is answered.
                drop(outer);
                conn.deliver(Some(input), *item);
                outer = conn.engine.enter(Some(m));
                continue;
            };
            let engine = &mut conn.engine;
            let over = engine.msgs[m].as_ref().expect("live").budget.is_over();
            let Some(id) = entry.reply_id() else {
                match (entry, is_async(item)) {
                    _ if over => {}
                    (Entry::Request(r), true) => {
                        // In its turn, as a request entry starts: what it
                        // does before its first `.await` (a request of its
                        // own on the peer) comes in the batch's order.
                        let w = waiting(input, r, None);
                        self.start_in_turn(engine, w, scope.ctx, out);
                    }
                    _ => self.notify(entry, scope),
                }
                continue;
            };
            let msg = engine.msgs[m].as_mut().expect("live");
            msg.replies.push(ReplyState::Pending(id_range(input, id)));
            match entry {
                Entry::Request(r) if is_async(item) && !over => {
                    let w = waiting(input, r, Some((m, k)));
                    // A call ready at once (a cache hit) is answered as a
                    // sync entry is, and the entries after it see what its
                    // reply took of the size limit, not the room held for
                    // it (so that they fit as they would in `handle`).
                    self.start_in_turn(engine, w, scope.ctx, out);
                }
                _ => {
                    if over {
                        // Answered with the too-large error, not run.
                        self.report_unrun(entry.request().map(|r| r.method()), Some(id));
                    }
                    msg.decide_batch_entry(k, false, |into, id, allowance, _| {
                        self.answer(&entry, id, scope, into, allowance)
                    });
                }
            }
            k += 1;
        }
        drop(outer);
        // Written by `Connection::start` if already complete.
        conn.engine.msgs[m].as_mut().expect("live").sealed = true;
    }

    /// Starts an async call as [`launch_unpolled`](Self::launch_unpolled) does and polls it
    /// first now, in its turn, not after the whole batch (or every message
    /// of a read) is started: the handlers' code before their first
    /// `.await` runs in the order the calls came, notifications' as
    /// requests'. Pending, it is polled again when woken.
    fn start_in_turn<B: ReplyBuf>(
        &self,
        engine: &mut Engine,
        w: Waiting,
        ctx: &Context,
        out: &mut B,
    ) {
        let Some(index) = self.launch_unpolled(engine, w, ctx) else {
            return;
        };
        self.poll_slot(engine, index, out);
        // Its deadline's timer is armed now: no poll of the engine need
        // follow (a transport may wait to be woken, and nothing else wakes
        // it), and an unpolled timer wakes nobody.
        if engine.slots[index].task.is_some() && !engine.timer_polled && engine.timer_fired() {
            engine.ready.waker.wake();
        }
    }

    /// Starts an async call that just arrived if a slot under the cap is
    /// free and no call waits for one, else queues it: calls start in
    /// arrival order. A slot freed outside a poll (a cancellation) is the
    /// queue's front's, which the next poll starts; checking the cap alone
    /// gave it to whichever call arrived first after it. The first poll of
    /// a call started (its slot, returned) is left to the caller.
    fn launch_unpolled(&self, engine: &mut Engine, mut w: Waiting, ctx: &Context) -> Option<usize> {
        if engine.running >= self.max_in_flight || !engine.waiting.is_empty() {
            w.queued = Some(Instant::now());
            engine.waiting.push_back(w);
            return None;
        }
        self.run(engine, w, ctx)
    }

    /// Starts an async call in a free slot (the caller checked the cap) and
    /// returns the slot, which the caller polls or puts on the ready list.
    /// An entry of a batch already past the size limit is answered with
    /// the too-large error instead, not run (`None`).
    fn run(&self, engine: &mut Engine, w: Waiting, ctx: &Context) -> Option<usize> {
        if let Some((m, k)) = w.target
            && let Some(msg) = engine.msgs[m].as_mut()
            && msg.batch
            && msg.budget.is_over()
        {
            // Answered with the too-large error, not run.
            let method = core::str::from_utf8(&w.method).ok();
            self.report_unrun(method, w.id.as_deref().map(Id::from_validated));
            msg.decide_batch_entry(k, false, |into, id, _, too_large| {
                too_large.write(into, id);
                (too_large.len_for(id), Outcome::TooLarge)
            });
            return None;
        }
        // None when another dispatcher queued the call (a connection driven
        // by two): it is answered with an error below, not left undecided
        // (its message would have waited for good).
        let handler = match self.lookup_bytes(&w.method) {
            Some(Handler::Async(handler)) => Some(handler),
            _ => None,
        };
        let index = engine.slot();
        let cancel = engine.fresh_cancellation(index);
        // One clock reading for both (the same clock, but for tokio's
        // paused clock in tests).
        let now = Instant::now();
        let mut started = now.into_std();
        // From its arrival: the wait for a slot counts. A timeout too long
        // for the clock (`Duration::MAX`) is no deadline.
        let deadline = self
            .timeout
            .and_then(|t| w.queued.unwrap_or(now).checked_add(t));
        let call = AsyncCall {
            params: w.params,
            state: Arc::clone(&self.state),
            ctx: ctx.clone(),
            method: w.method.clone(),
            id: w.id.clone(),
            cancel,
            deadline: deadline.map(Instant::into_std),
        };
        engine.running += 1;
        // Its span names the call, as the handler's would have.
        let answer_now = |e: RpcError| -> Pin<Box<dyn PendingCall>> {
            Box::pin(Pending {
                fut: std::future::ready(Err::<Done, RpcError>(e)),
                span: span_of(&w.method, w.id.as_deref()),
            })
        };
        let mut subs = Vec::new();
        let call = match (self.timeout, deadline) {
            // Its deadline passed while it waited: answered as timed out,
            // never run (its client has given up on it). Queued calls are
            // answered so by `expire_waiting` without a slot; this is for
            // a deadline that passed since, or a zero timeout.
            (Some(timeout), Some(deadline)) if deadline <= now => {
                drop(call);
                // Reported with its wait, as `expire_waiting` does.
                started = w.queued.unwrap_or(now).into_std();
                answer_now(self.timeout_error(timeout))
            }
            _ => match handler {
                None => {
                    drop(call);
                    answer_now(RpcError::internal(
                        "no async handler of this name here: the connection is driven by another dispatcher than the one that read the call",
                    ))
                }
                Some(handler) => {
                    // The handler itself may panic before returning a
                    // future: handler code too, so kept quiet as its polls
                    // are.
                    let outer = engine.enter(w.target.map(|(m, _)| m));
                    let made = super::catch_handler_panic(self.quiet, || handler(call));
                    drop(outer);
                    if let Some(gate) = engine.gate.as_deref()
                        && gate.has_fresh()
                    {
                        gate.take_fresh(&mut subs);
                    }
                    match made {
                        Ok(call) => call,
                        Err(panic) => answer_now(panic_error(&*panic, self.panic_messages)),
                    }
                }
            },
        };
        engine.slots[index].task = Some(Task {
            call: HandlerFuture {
                fut: call,
                quiet: self.quiet,
            },
            target: w.target,
            id: w.id,
            method: w.method,
            deadline,
            started,
            subs,
        });
        if let Some(deadline) = deadline {
            engine.cover(deadline);
        }
        Some(index)
    }

    /// Drives the engine: polls the woken calls, enforces deadlines, starts
    /// queued calls as slots free up, and writes complete replies to `out`.
    fn poll<B: ReplyBuf>(
        &self,
        cx: &mut TaskContext<'_>,
        conn: &mut Connection,
        out: &mut B,
    ) -> Poll<usize> {
        let engine = &mut conn.engine;
        engine.ready.waker.register(cx.waker());
        if !engine.cancelled.is_empty() {
            self.report_cancelled(engine);
        }
        let mut woken = std::mem::take(&mut engine.woken);
        engine.ready.take_into(&mut woken);
        let mut written = 0;
        for &index in &woken {
            written += self.poll_slot(engine, index, out);
        }
        woken.clear();
        engine.woken = woken;
        written += self.expire(cx, engine, out);
        written += self.expire_waiting(engine, out);
        let mut started = false;
        while engine.running < self.max_in_flight
            && let Some(w) = engine.waiting.pop_front()
        {
            if let Some(index) = self.run(engine, w, &conn.context) {
                // Polled now, in its turn: what the handler does before
                // its first `.await` comes before the handlers of messages
                // a transport starts after this poll (they ran first when
                // it was left to the next poll).
                written += self.poll_slot(engine, index, out);
                started |= engine.slots[index].task.is_some();
            }
        }
        let engine = &mut conn.engine;
        // The deadlines of the calls started and still running: their
        // timer is polled, else it wakes nobody.
        if started && !engine.timer_polled && engine.timer_fired() {
            cx.waker().wake_by_ref();
        }
        if let Some(timeout) = self.timeout {
            engine.cover_front(timeout, cx);
        }
        written += engine.flush_complete(out, conn.max_retained);
        if written > 0 {
            Poll::Ready(written)
        } else {
            Poll::Pending
        }
    }

    /// Reports the calls cancelled by id since the last poll to the
    /// observer, with [`REQUEST_CANCELLED`] (whether a reply carried it or,
    /// for a single request whose client no longer waits, none was sent).
    #[cold]
    fn report_cancelled(&self, engine: &mut Engine) {
        for c in engine.cancelled.drain(..) {
            if let Some(observer) = &self.observer {
                let method = core::str::from_utf8(&c.method).ok();
                let id = c.id.as_deref().map(Id::from_validated);
                self.report(
                    observer,
                    method,
                    id,
                    Outcome::Error(REQUEST_CANCELLED),
                    c.started,
                );
            }
        }
    }

    /// Polls the call in slot `index`; returns 1 if it wrote a complete
    /// single reply to `out`.
    fn poll_slot<B: ReplyBuf>(&self, engine: &mut Engine, index: usize, out: &mut B) -> usize {
        let Some(slot) = engine.slots.get_mut(index) else {
            return 0;
        };
        // Before the poll: a wake during it lists the slot again.
        slot.shared.listed.store(false, Ordering::Release);
        let waker = slot.waker.clone();
        let Some(task) = slot.task.as_mut() else {
            return 0;
        };
        let mut cx = TaskContext::from_waker(&waker);
        // The handler code polled now is its message's (see `ReplyGate`).
        let gate = engine.gate.as_deref().map(|gate| {
            let seq = task
                .target
                .and_then(|(m, _)| engine.msgs[m].as_ref())
                .map_or(0, |msg| msg.seq);
            (gate, seq)
        });
        let call = task.call.fut.as_mut();
        let (quiet, messages) = (self.quiet, self.panic_messages);
        let poll = |sink: &mut Sink<'_>, limit: usize| {
            let mut ready = None;
            let outer = gate.map(|(gate, seq)| gate.enter(seq));
            let r = guard_panics(quiet, messages, || {
                match call.poll_reply(&mut cx, sink.reborrow(), limit) {
                    Poll::Ready(r) => {
                        ready = Some(());
                        r
                    }
                    Poll::Pending => Ok(done_marker()),
                }
            });
            drop(outer);
            match ready {
                Some(()) => Poll::Ready(r),
                // A panic is an outcome too.
                None if r.is_err() => Poll::Ready(r),
                None => Poll::Pending,
            }
        };
        let mut outcome = None;
        let finished = match task.target {
            None => match poll(&mut Sink::Dyn(&mut super::reply::Discard), usize::MAX) {
                Poll::Ready(r) => {
                    outcome = Some(super::notification_outcome(r.map(|_| ())));
                    true
                }
                Poll::Pending => false,
            },
            Some((m, k)) => {
                let Some(msg) = engine.msgs[m].as_mut() else {
                    return 0;
                };
                if !msg.batch {
                    let id = msg.id(k);
                    let too_large_len = msg.too_large.len_for(id);
                    let allowance = msg.budget.allowance(too_large_len);
                    match poll_reply(out, id, allowance, &msg.too_large, poll) {
                        Poll::Pending => false,
                        Poll::Ready((len, written)) => {
                            out.end_reply();
                            msg.budget.commit(too_large_len, len, written);
                            msg.replies[k] = ReplyState::Written;
                            msg.next = 1;
                            outcome = Some(written);
                            true
                        }
                    }
                } else {
                    msg.poll_batch_entry(k, true, |into, id, allowance, too_large| {
                        let r = poll_reply(into, id, allowance, too_large, poll);
                        if let Poll::Ready((_, written)) = r {
                            outcome = Some(written);
                        }
                        r
                    })
                }
            }
        };
        if let Some(gate) = engine.gate.as_deref()
            && gate.has_fresh()
            && let Some(task) = engine.slots[index].task.as_mut()
        {
            gate.take_fresh(&mut task.subs);
        }
        if !finished {
            return 0;
        }
        let task = engine.free_slot(index, false);
        if !task.subs.is_empty()
            && let Some(gate) = &engine.gate
        {
            // Kept only if its reply carries the result (a batch entry
            // decided without it was answered with the too-large error).
            gate.settle(&task.subs, outcome == Some(Outcome::Result));
        }
        let single = task
            .target
            .is_some_and(|(m, _)| engine.msgs[m].as_ref().is_some_and(|msg| !msg.batch));
        if let Some(observer) = &self.observer {
            let method = core::str::from_utf8(&task.method).ok();
            let id = task.id.as_deref().map(Id::from_validated);
            let outcome = outcome.unwrap_or(Outcome::TooLarge);
            self.report(observer, method, id, outcome, task.started);
        }
        drop(task);
        if single {
            // Its reply is in `out` already (and marked); the message is
            // done.
            return 1;
        }
        0
    }

    /// The error a call past its deadline is answered with (the same
    /// bytes as [`expire`](Self::expire) writes).
    fn timeout_error(&self, timeout: std::time::Duration) -> RpcError {
        RpcError::new(self.timeout_code, "Request timed out")
            .with_raw_data(format!("{{\"timeout_ms\":{}}}", timeout.as_millis()))
    }

    /// Answers every call past its deadline with the timeout error (nothing
    /// for a notification), and arms the timer for the next deadline.
    fn expire<B: ReplyBuf>(
        &self,
        cx: &mut TaskContext<'_>,
        engine: &mut Engine,
        out: &mut B,
    ) -> usize {
        let Some(timeout) = self.timeout else {
            return 0;
        };
        if engine.running == 0 {
            // The timer covers no call: its deadline is forgotten, so that
            // the next launch sets it anew. Kept, a deadline past (its call
            // ended before it) made the next launch's `cover` leave the
            // fired timer alone, and the next call never timed out for a
            // transport that polls only when woken.
            engine.timer_at = None;
            return 0;
        }
        // Set at each launch to come no later than the call's deadline
        // (`Engine::cover`): until it fires, no call is past its deadline,
        // and nothing here reads the clock.
        if !engine.timer_fired() {
            return 0;
        }
        let now = Instant::now();
        let mut written = 0;
        let mut next: Option<Instant> = None;
        for index in 0..engine.slots.len() {
            let Some(deadline) = engine.slots[index].task.as_ref().and_then(|t| t.deadline) else {
                continue;
            };
            if deadline > now {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
                continue;
            }
            let task = engine.free_slot(index, true);
            // Answered (a notification: ended) with the timeout error, and
            // counted so, as a call that finishes is.
            let mut outcome = Outcome::Error(self.timeout_code);
            if let Some((m, k)) = task.target
                && let Some(msg) = engine.msgs[m].as_mut()
            {
                outcome = self.write_timeout(msg, k, timeout, true, out);
                if !msg.batch {
                    written += 1;
                }
            }
            task.call.fut.answered(outcome);
            if let Some(observer) = &self.observer {
                let method = core::str::from_utf8(&task.method).ok();
                let id = task.id.as_deref().map(Id::from_validated);
                self.report(observer, method, id, outcome, task.started);
            }
        }
        engine.timer_at = next;
        if let Some(next) = next
            && let Some(timer) = engine.timer.as_mut()
        {
            timer.as_mut().reset(next);
            engine.timer_polled = false;
            if engine.timer_fired() {
                cx.waker().wake_by_ref();
            }
        }
        written
    }

    /// Answers the queued calls whose deadline passed while they waited for
    /// a slot with the timeout error (nothing for a notification), in queue
    /// order, without giving them a slot: a slot each, with a future that
    /// only returned the error, cleared at most `max_in_flight` of them per
    /// poll, so that a backlog of n cost n / `max_in_flight` wake-ups.
    /// Deadlines count from arrival and the queue is in arrival order, so
    /// the expired calls are at its front.
    fn expire_waiting<B: ReplyBuf>(&self, engine: &mut Engine, out: &mut B) -> usize {
        let Some(timeout) = self.timeout else {
            return 0;
        };
        if engine.waiting.is_empty() {
            return 0;
        }
        let now = Instant::now();
        let mut written = 0;
        while let Some(w) = engine.waiting.front()
            && w.queued
                .and_then(|queued| queued.checked_add(timeout))
                .is_some_and(|deadline| deadline <= now)
        {
            let w = engine.waiting.pop_front().expect("its front");
            // Answered and counted as `expire` answers a running call past
            // its deadline.
            let mut outcome = Outcome::Error(self.timeout_code);
            if let Some((m, k)) = w.target
                && let Some(msg) = engine.msgs[m].as_mut()
            {
                outcome = self.write_timeout(msg, k, timeout, false, out);
                if !msg.batch {
                    written += 1;
                }
            }
            #[cfg(feature = "tracing")]
            {
                super::record_outcome(&span_of(&w.method, w.id.as_deref()), outcome);
            }
            if let Some(observer) = &self.observer {
                let method = core::str::from_utf8(&w.method).ok();
                let id = w.id.as_deref().map(Id::from_validated);
                // Its wait is its latency: counted from the answer, as it
                // was, a call that waited out its timeout looked instant.
                let arrived = w.queued.unwrap_or(now).into_std();
                self.report(observer, method, id, outcome, arrived);
            }
        }
        written
    }

    /// Answers reply `k` of `msg` with the timeout error; returns what it
    /// was answered with (the too-large error in its place when it did not
    /// fit, or when the batch is past its size limit and the call was not
    /// `running`: see [`poll_batch_entry`](Msg::poll_batch_entry)).
    fn write_timeout<B: ReplyBuf>(
        &self,
        msg: &mut Msg,
        k: usize,
        timeout: std::time::Duration,
        running: bool,
        out: &mut B,
    ) -> Outcome {
        let data = format!("{{\"timeout_ms\":{}}}", timeout.as_millis());
        let tail = |o: &mut dyn ReplyBuf| {
            write_error_tail(
                o,
                self.timeout_code,
                "Request timed out",
                Some(data.as_bytes()),
            );
        };
        if msg.batch {
            // A batch already past its size limit gets the too-large error
            // instead unless the call was running (`poll_batch_entry`,
            // which then does not call this): the outcome stays so.
            let mut outcome = Outcome::TooLarge;
            msg.decide_batch_entry(k, running, |into, id, allowance, too_large| {
                let written =
                    write_error_reply(into, id, allowance, too_large, self.timeout_code, |o| {
                        tail(o)
                    });
                outcome = written.1;
                written
            });
            outcome
        } else {
            let outcome = write_single_error(msg, k, out, self.timeout_code, tail);
            out.end_reply();
            outcome
        }
    }
}

/// Writes the error reply of the single request `k` of `msg` to `out`
/// (error `code`, its tail written by `tail`), within the message's budget.
fn write_single_error<B: ReplyBuf>(
    msg: &mut Msg,
    k: usize,
    out: &mut B,
    code: i32,
    tail: impl FnOnce(&mut dyn ReplyBuf),
) -> Outcome {
    let id = msg.id(k);
    let too_large_len = msg.too_large.len_for(id);
    let allowance = msg.budget.allowance(too_large_len);
    let (len, refused) = write_error_reply(out, id, allowance, &msg.too_large, code, |o| tail(o));
    msg.budget.commit(too_large_len, len, refused);
    msg.replies[k] = ReplyState::Written;
    msg.next = 1;
    refused
}

/// A stand-in `Done` for a pending poll (never written).
fn done_marker() -> Done {
    super::reply::done()
}

/// The waiting form of an async request: owned slices of the input.
fn waiting(input: &Bytes, r: crate::request::Request<'_>, target: Target) -> Waiting {
    Waiting {
        target,
        method: share(input, r.method().as_bytes()),
        id: r.id().map(|id| share(input, id.as_bytes())),
        params: r.params().map(|p| OwnedParams::of(input, p.as_bytes())),
        queued: None,
    }
}

#[cfg(test)]
mod tests {
    use super::ReplyGate;
    use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

    /// A panic that escapes marked code (an observer's: handler panics are
    /// caught inside) used to leave the thread marked as that connection's
    /// handler code, so that later code on the thread (a task a handler of
    /// another connection spawned, should its gate reuse the address) was
    /// taken for it.
    #[test]
    fn a_panic_through_marked_code_leaves_no_mark() {
        let gate = ReplyGate::default();
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            gate.answering(|| resume_unwind(Box::new("observer")), |_: &()| true)
        }));
        assert!(unwound.is_err());
        assert_eq!(gate.current(), None);

        let unwound = catch_unwind(AssertUnwindSafe(|| {
            let _mark = gate.enter(7);
            assert_eq!(gate.current(), Some(7));
            resume_unwind(Box::new("observer"))
        }));
        assert!(unwound.is_err());
        assert_eq!(gate.current(), None);
    }
}
