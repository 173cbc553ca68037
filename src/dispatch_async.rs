//! Async handlers (feature `async`, also enabled by `tokio`): for I/O-bound
//! work such as forwarding to an upstream node.
//!
//! An async handler's future must be `'static` (it may be polled after the
//! message's arena is gone), so it receives its params as a [`bytes::Bytes`]
//! slice of the input: the same bytes, reference-counted, never copied. The
//! entries of a batch run concurrently, at most `max_in_flight` at a time, on
//! the caller's task (no spawning, so any executor works); their replies are
//! assembled in request order.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use bumpalo::Bump;
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt, stream};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::dispatch::{
    Dispatcher, DispatcherBuilder, Handler, PanicData, RpcError, panic_reason, write_error,
    write_head, write_parse_error, write_too_large,
};
use crate::envelope::{Entry, Message};
use crate::error::INTERNAL_ERROR;
use crate::value::{Id, Params};

type BoxFuture = Pin<Box<dyn Future<Output = Result<RawJson, RpcError>> + Send + 'static>>;

/// An async handler's future with its entry index, panics caught.
type Guarded =
    Pin<Box<dyn Future<Output = (usize, std::thread::Result<Result<RawJson, RpcError>>)> + Send>>;

pub(crate) type AsyncHandler<S> = Box<dyn Fn(AsyncCall<S>) -> BoxFuture + Send + Sync>;

/// A result an async handler produced: JSON text, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawJson(Bytes);

impl RawJson {
    /// Serializes `value` with serde_json.
    pub fn serialize<T: Serialize + ?Sized>(value: &T) -> Result<RawJson, RpcError> {
        serde_json::to_vec(value)
            .map(|v| RawJson(Bytes::from(v)))
            .map_err(|e| {
                RpcError::internal("result could not be serialized").with_data(&e.to_string())
            })
    }

    /// JSON text that is already valid (an upstream node's `result`), not
    /// checked again.
    pub fn from_trusted(json: Bytes) -> RawJson {
        RawJson(json)
    }

    /// The JSON text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The params of an async call: a validated array or object, as a
/// reference-counted slice of the input message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedParams(Bytes);

impl OwnedParams {
    /// A borrowed view, for positional and named access.
    pub fn view(&self) -> Params<'_> {
        Params::from_validated(&self.0)
    }

    /// The raw bytes (a slice of the input, not a copy).
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// Decodes into an owned `T` with serde_json; a failure is -32602.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, RpcError> {
        serde_json::from_slice(&self.0).map_err(RpcError::from)
    }
}

/// Everything an async handler receives; all of it owned, so the future can
/// be `'static`.
pub struct AsyncCall<S> {
    /// The params; `None` when absent or `null`.
    pub params: Option<OwnedParams>,
    /// The caller's state.
    pub state: Arc<S>,
    method: Bytes,
    id: Option<Bytes>,
}

impl<S> AsyncCall<S> {
    /// The method name.
    pub fn method(&self) -> &str {
        core::str::from_utf8(&self.method).unwrap_or_default()
    }

    /// The request id as JSON text, byte for byte; `None` for a
    /// notification.
    pub fn id(&self) -> Option<&[u8]> {
        self.id.as_deref()
    }

    /// Decodes the params into an owned `T` (absent params as `[]`).
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, RpcError> {
        match &self.params {
            Some(p) => p.decode(),
            None => serde_json::from_slice(b"[]").map_err(RpcError::from),
        }
    }
}

impl<S: 'static> DispatcherBuilder<S> {
    /// Registers an async handler for `name`, run by
    /// [`Dispatcher::handle_async`].
    ///
    /// ```
    /// use rpcwire::{AsyncCall, Dispatcher, RawJson};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let d = Dispatcher::<()>::builder()
    ///     .async_method("eth_chainId", |_call: AsyncCall<()>| async { RawJson::serialize("0x1") })
    ///     .build()?;
    /// let mut out = Vec::new();
    /// let input = bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#);
    /// d.handle_async(input, &std::sync::Arc::new(()), &mut out).await;
    /// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#);
    /// # Ok::<(), rpcwire::RouterError>(()) }).unwrap();
    /// ```
    pub fn async_method<F, Fut>(mut self, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(AsyncCall<S>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<RawJson, RpcError>> + Send + 'static,
    {
        let boxed: AsyncHandler<S> = Box::new(move |call| Box::pin(handler(call)));
        self.push(name.into(), Handler::Async(boxed));
        self
    }

    /// The most async handlers of one batch running at once (default 16).
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.set_max_in_flight(n);
        self
    }
}

/// What one entry of a message turned into before anything is awaited.
enum Slot {
    /// The reply is written (empty for a notification).
    Done(Vec<u8>),
    /// An async handler's future, and the id to answer with (`None`: a
    /// notification, run but not answered).
    Pending(Option<Bytes>, BoxFuture),
}

impl<S: Send + Sync + 'static> Dispatcher<S> {
    /// Handles one message whose entries may have async handlers, and
    /// appends the complete reply to `out`, or nothing. Returns whether a
    /// reply was written.
    ///
    /// Synchronous handlers run first, in place; async ones then run
    /// concurrently (up to [`max_in_flight`](DispatcherBuilder::max_in_flight)
    /// at a time), and the replies are written in request order. A panic in
    /// a handler becomes -32603 for that entry only. The response size limit
    /// applies as in [`handle`](Dispatcher::handle), except that entries
    /// beyond it have already run: their results are replaced by the error.
    pub async fn handle_async(&self, input: Bytes, state: &Arc<S>, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        let (is_batch, slots) = match self.plan(&input, state, out) {
            Some(planned) => planned,
            None => return out.len() > start,
        };
        let mut slots = slots;
        let mut ids: Vec<Option<Option<Bytes>>> = Vec::with_capacity(slots.len());
        let mut pending: Vec<(usize, BoxFuture)> = Vec::new();
        for (i, slot) in slots.iter_mut().enumerate() {
            match std::mem::replace(slot, Slot::Done(Vec::new())) {
                Slot::Done(bytes) => {
                    *slot = Slot::Done(bytes);
                    ids.push(None);
                }
                Slot::Pending(id, fut) => {
                    pending.push((i, fut));
                    ids.push(Some(id));
                }
            }
        }
        // Boxed to a named type first: a closure in the stream would make the
        // future's `Send` proof higher-ranked, which rustc cannot show.
        let guarded: Vec<Guarded> = pending
            .into_iter()
            .map(|(i, fut)| -> Guarded {
                Box::pin(async move { (i, AssertUnwindSafe(fut).catch_unwind().await) })
            })
            .collect();
        let finished: Vec<(usize, std::thread::Result<Result<RawJson, RpcError>>)> =
            stream::iter(guarded)
                .buffered(self.max_in_flight)
                .collect()
                .await;
        for (i, result) in finished {
            let Some(Some(id)) = ids[i].take() else {
                continue; // A notification: run, never answered.
            };
            let id = Id::from_validated(&id);
            let mut reply = Vec::new();
            match result {
                Ok(Ok(json)) => {
                    write_head(&mut reply, id);
                    reply.extend_from_slice(json.as_bytes());
                    reply.push(b'}');
                }
                Ok(Err(e)) => write_error(
                    &mut reply,
                    id,
                    e.code(),
                    e.message(),
                    e.data().map(str::as_bytes),
                ),
                Err(panic) => {
                    let reason = panic
                        .downcast_ref::<&str>()
                        .copied()
                        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                        .unwrap_or("handler panicked");
                    let mut data = b"{\"panic\":".to_vec();
                    crate::write::string(&mut data, reason);
                    data.push(b'}');
                    write_error(
                        &mut reply,
                        id,
                        INTERNAL_ERROR,
                        "Internal error",
                        Some(&data),
                    );
                }
            }
            slots[i] = Slot::Done(reply);
        }
        self.assemble(is_batch, slots, out, start);
        out.len() > start
    }

    /// Parses `input` and runs what can run without awaiting. Whole-message
    /// errors are written to `out` directly (then `None`).
    fn plan(&self, input: &Bytes, state: &Arc<S>, out: &mut Vec<u8>) -> Option<(bool, Vec<Slot>)> {
        let arena = Bump::new();
        let (is_batch, entries): (bool, Vec<Entry<'_>>) = match self.parser.parse(input, &arena) {
            Err(e) => {
                write_parse_error(out, e);
                return None;
            }
            Ok(Message::Single(e)) => (false, vec![e]),
            Ok(Message::Batch(b)) => (true, b.collect()),
        };
        let slice = |b: &[u8]| input.slice_ref(b);
        let slots = entries
            .into_iter()
            .map(|entry| match entry {
                Entry::Request(req) => match self.router.get(req.method()) {
                    Some(Handler::Async(handler)) => {
                        let method = match input.as_ptr_range().contains(&req.method().as_ptr()) {
                            true => slice(req.method().as_bytes()),
                            // Decoded from escapes into the arena: copied.
                            false => Bytes::copy_from_slice(req.method().as_bytes()),
                        };
                        let id = req.id().map(|i| slice(i.as_bytes()));
                        let call = AsyncCall {
                            params: req.params().map(|p| OwnedParams(slice(p.as_bytes()))),
                            state: Arc::clone(state),
                            method,
                            id: id.clone(),
                        };
                        // The handler itself may panic before returning a future.
                        match std::panic::catch_unwind(AssertUnwindSafe(|| handler(call))) {
                            Ok(fut) => Slot::Pending(id, fut),
                            Err(panic) => {
                                let e =
                                    RpcError::internal("Internal error").with_data(&PanicData {
                                        panic: panic_reason(&*panic),
                                    });
                                Slot::Pending(id, Box::pin(async move { Err(e) }))
                            }
                        }
                    }
                    // Unknown methods and sync handlers: answered now, exactly
                    // as `handle` answers them.
                    _ => {
                        let mut reply = Vec::new();
                        self.entry(entry, state, &arena, &mut reply, 0);
                        Slot::Done(reply)
                    }
                },
                Entry::Invalid(_) => {
                    let mut reply = Vec::new();
                    self.entry(entry, state, &arena, &mut reply, 0);
                    Slot::Done(reply)
                }
            })
            .collect();
        Some((is_batch, slots))
    }

    /// Writes the finished replies in order, under the size limit.
    fn assemble(&self, is_batch: bool, slots: Vec<Slot>, out: &mut Vec<u8>, start: usize) {
        let replies = slots.into_iter().map(|s| match s {
            Slot::Done(bytes) => bytes,
            Slot::Pending(..) => Vec::new(),
        });
        if !is_batch {
            for reply in replies {
                if reply.len() > self.max_response_len {
                    let id = reply_id_of(&reply);
                    write_too_large(out, Id::from_validated(&id), self.max_response_len);
                } else {
                    out.extend_from_slice(&reply);
                }
            }
            return;
        }
        out.push(b'[');
        let mut any = false;
        let mut over = false;
        for reply in replies {
            if reply.is_empty() {
                continue;
            }
            if any {
                out.push(b',');
            }
            any = true;
            if !over && out.len() - start + reply.len() + 1 > self.max_response_len {
                over = true;
            }
            if over {
                write_too_large(
                    out,
                    Id::from_validated(&reply_id_of(&reply)),
                    self.max_response_len,
                );
            } else {
                out.extend_from_slice(&reply);
            }
        }
        if any {
            out.push(b']');
        } else {
            out.truncate(start);
        }
    }
}

/// The id bytes of a reply this module wrote (`{"jsonrpc":"2.0","id":…,`).
/// Only on the over-limit path: the reply is read back with the crate's own
/// response parser. A handler's unchecked raw result could make it invalid;
/// then the error is answered with `null`.
fn reply_id_of(reply: &[u8]) -> Vec<u8> {
    let arena = Bump::new();
    match crate::parse_response(reply, &arena) {
        Ok(crate::ResponseMessage::Single(r)) => r.id().as_bytes().to_vec(),
        _ => b"null".to_vec(),
    }
}
