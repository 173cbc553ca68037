//! The one reply writer, used by sync and async dispatch alike: the buffer
//! trait replies go into, the [`Reply`] a handler writes its result through,
//! how a handler's return value becomes a reply ([`IntoResponse`]), and the
//! per-message [`Budget`] that makes the response size limit an upper bound
//! on memory and on the bytes sent.
//!
//! A reply is written where it will be sent: the envelope head
//! (`{"jsonrpc":"2.0","id":…,"result":`) goes into the output buffer, the
//! handler writes its result after it, and the writer closes the object. If
//! the handler fails (or panics, or writes past its allowance), what it wrote
//! is cut off and an error object takes its place. There is no intermediate
//! `Value`, and results that are already JSON are copied, not re-validated.

use std::io;

use serde::Serialize;

use super::error::RpcError;
use crate::codes::METHOD_NOT_FOUND;
use crate::error::Error;
use crate::json::RawJson;
use crate::request::Id;
use crate::write;

/// A buffer replies are written into: `Vec<u8>`, `rpcwire::bytes::BytesMut`, or a
/// transport's own frame buffer.
///
/// Replies are appended; a writer may cut back what it appended (to replace
/// a failed result by an error), never what was there before.
///
/// ```
/// use rpcwire::dispatch::ReplyBuf;
/// let mut out = rpcwire::bytes::BytesMut::new();
/// out.extend_from_slice(b"Content-Length: ");
/// assert_eq!(ReplyBuf::len(&out), 16);
/// ```
pub trait ReplyBuf {
    /// The number of bytes in the buffer.
    fn len(&self) -> usize;
    /// Whether the buffer is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends `bytes`.
    fn extend_from_slice(&mut self, bytes: &[u8]);
    /// Appends one byte.
    fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
    }
    /// Cuts the buffer back to `len` bytes (`len` is at most [`len`](ReplyBuf::len)).
    fn truncate(&mut self, len: usize);
    /// Makes room for `additional` more bytes (a hint).
    fn reserve(&mut self, additional: usize) {
        let _ = additional;
    }
    /// The buffer as a `Vec<u8>`, when it is one: writers then take a
    /// statically dispatched path. Other buffers keep the default `None`.
    fn as_vec_mut(&mut self) -> Option<&mut Vec<u8>> {
        None
    }
    /// Called after each complete reply appended by the pipelined API
    /// (`Connection::start` and `Connection::poll_replies`, feature
    /// `async`), which may append several replies in one call: transports
    /// that send each reply as a frame of its own (WebSocket) record here
    /// where one ends. The default does nothing.
    #[inline(always)]
    fn end_reply(&mut self) {}
}

impl ReplyBuf for Vec<u8> {
    #[inline(always)]
    fn len(&self) -> usize {
        Vec::len(self)
    }
    #[inline(always)]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes)
    }
    #[inline(always)]
    fn push(&mut self, byte: u8) {
        Vec::push(self, byte)
    }
    #[inline(always)]
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len)
    }
    #[inline(always)]
    fn reserve(&mut self, additional: usize) {
        Vec::reserve(self, additional)
    }
    #[inline(always)]
    fn as_vec_mut(&mut self) -> Option<&mut Vec<u8>> {
        Some(self)
    }
}

impl<T: ReplyBuf + ?Sized> ReplyBuf for &mut T {
    #[inline(always)]
    fn len(&self) -> usize {
        (**self).len()
    }
    #[inline(always)]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        (**self).extend_from_slice(bytes)
    }
    #[inline(always)]
    fn push(&mut self, byte: u8) {
        (**self).push(byte)
    }
    #[inline(always)]
    fn truncate(&mut self, len: usize) {
        (**self).truncate(len)
    }
    #[inline(always)]
    fn reserve(&mut self, additional: usize) {
        (**self).reserve(additional)
    }
    #[inline(always)]
    fn as_vec_mut(&mut self) -> Option<&mut Vec<u8>> {
        (**self).as_vec_mut()
    }
    #[inline(always)]
    fn end_reply(&mut self) {
        (**self).end_reply()
    }
}

impl ReplyBuf for bytes::BytesMut {
    #[inline]
    fn len(&self) -> usize {
        bytes::BytesMut::len(self)
    }
    #[inline]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        bytes::BytesMut::extend_from_slice(self, bytes)
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        bytes::BytesMut::truncate(self, len)
    }
    #[inline]
    fn reserve(&mut self, additional: usize) {
        bytes::BytesMut::reserve(self, additional)
    }
}

/// A buffer that keeps nothing: where a notification's handler writes,
/// with no limit, so every write succeeds. (A variant of [`Sink`] of its
/// own cost every reply's writes a third arm: 2-5% on batches.)
pub(crate) struct Discard;

impl ReplyBuf for Discard {
    fn len(&self) -> usize {
        0
    }
    fn extend_from_slice(&mut self, _: &[u8]) {}
    fn truncate(&mut self, _: usize) {}
}

/// Proof that a handler wrote a result: only [`Reply`]'s methods make one.
#[must_use = "return the Done from the handler"]
#[derive(Debug)]
pub struct Done(());

/// A `Done` for the engine's bookkeeping (never handed to a handler).
#[cfg(feature = "async")]
pub(crate) fn done() -> Done {
    Done(())
}

/// Where a handler writes its result: straight into the reply buffer, after
/// the envelope head. Each method consumes the `Reply` and returns
/// `Result<Done, RpcError>`, which a handler returns as it is.
///
/// Writes are bounded by the response size limit: a result that would make
/// the reply larger is refused before it is buffered (`json` stops
/// streaming), and the handler's reply becomes the "response too large"
/// error. A notification's handler writes into nothing: every write
/// succeeds (a `json` value is serialized into nothing), so work a handler
/// does after writing its result runs for a notification as for a request.
///
/// ```
/// # use rpcwire::{Call, Dispatcher, Connection};
/// let d = Dispatcher::builder(())
///     .method("eth_chainId", |call: Call<'_, ()>| call.reply.str("0x1"))
///     .method("eth_getBlockByNumber", |call: Call<'_, ()>| call.reply.raw(br#"{"number":"0x1"}"#))
///     .build()?;
/// let (mut conn, mut out) = (Connection::new(), Vec::new());
/// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#, &mut conn, &mut out);
/// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#);
/// # Ok::<(), rpcwire::router::BuildError>(())
/// ```
pub struct Reply<'a> {
    sink: Sink<'a>,
    /// The length the sink may reach with this result written.
    limit: usize,
}

/// Where a reply is written: a `Vec` (the common case, written to with
/// static calls) or any other [`ReplyBuf`]. Decided once per reply, where the
/// buffer's type is known, and handed down the handler path as it is.
pub(crate) enum Sink<'a> {
    Vec(&'a mut Vec<u8>),
    Dyn(&'a mut dyn ReplyBuf),
}

impl<'a> Sink<'a> {
    /// The sink over `out`: a `Vec` is recognised statically.
    #[inline(always)]
    pub(crate) fn of<B: ReplyBuf>(out: &'a mut B) -> Self {
        // Asked twice: returning the first answer's borrow from one arm and
        // `out` from the other is beyond the borrow checker. For a `Vec`
        // both calls are inlined to constants.
        if out.as_vec_mut().is_some() {
            Sink::Vec(out.as_vec_mut().expect("asked just above"))
        } else {
            Sink::Dyn(out)
        }
    }

    /// The number of bytes in the sink.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        match self {
            Sink::Vec(v) => v.len(),
            Sink::Dyn(d) => d.len(),
        }
    }

    /// Drops what was written after the first `len` bytes.
    #[inline(always)]
    pub(crate) fn truncate(&mut self, len: usize) {
        match self {
            Sink::Vec(v) => v.truncate(len),
            Sink::Dyn(d) => d.truncate(len),
        }
    }

    /// The same sink for a shorter borrow.
    #[inline(always)]
    pub(crate) fn reborrow(&mut self) -> Sink<'_> {
        match self {
            Sink::Vec(v) => Sink::Vec(v),
            Sink::Dyn(d) => Sink::Dyn(&mut **d),
        }
    }
}

impl<'a> Reply<'a> {
    #[inline(always)]
    pub(crate) fn new(sink: Sink<'a>, limit: usize) -> Self {
        Reply { sink, limit }
    }

    /// Writes with `f` (a bounded, small write) and checks the limit after.
    #[inline(always)]
    fn put(self, f: impl FnOnce(&mut dyn ReplyBufExt)) -> Result<Done, RpcError> {
        let limit = self.limit;
        match self.sink {
            Sink::Vec(v) => put_in(v, limit, |b| f(b)),
            Sink::Dyn(mut d) => put_in(&mut d, limit, |b| f(b)),
        }
    }

    /// A short result of at most `N` bytes, made by `write` (which returns
    /// its length) in place: into a `Vec` sink's room when the longest
    /// form fits the limit (no buffer on the stack copied after, through a
    /// call to `memcpy` whose loads waited for the buffer's stores: about
    /// a tenth of a quantity's round trip), else through a buffer.
    #[cfg(feature = "eth")]
    #[inline(always)]
    pub(crate) fn small<const N: usize>(
        mut self,
        write: impl FnOnce(&mut [u8; N]) -> usize,
    ) -> Result<Done, RpcError> {
        let limit = self.limit;
        if let Sink::Vec(v) = &mut self.sink
            && v.len() + N <= limit
        {
            let at = v.len();
            grow_within(*v, N + 1, limit.saturating_add(1));
            v.extend_from_slice(&[0u8; N]);
            let room: &mut [u8; N] = (&mut v[at..at + N]).try_into().expect("N bytes");
            let n = write(room);
            debug_assert!(n <= N);
            v.truncate(at + n);
            return Ok(Done(()));
        }
        let mut buf = [0u8; N];
        let n = write(&mut buf);
        self.raw(&buf[..n])
    }

    /// Pre-serialized JSON, copied as is: the zero-copy way to answer with
    /// bytes already known to be one JSON value (an upstream node's result
    /// its response parser read, a constant). Not validated in release
    /// builds: bytes that are not one JSON value make an invalid reply (and
    /// spoil a whole batch's array). Builds with debug assertions check it
    /// (the handler then fails, caught as a panic: -32603). For JSON of
    /// unknown origin use [`raw_json`](Reply::raw_json) with a value the
    /// parser read, or [`json`](Reply::json).
    pub fn raw(self, json: &[u8]) -> Result<Done, RpcError> {
        // Empty is the handler that wrote nothing, answered -32603 later.
        debug_assert!(
            json.is_empty() || crate::scan::is_one_value(json),
            "Reply::raw needs one JSON value: {:?}",
            String::from_utf8_lossy(&json[..json.len().min(64)])
        );
        let (len, limit) = (self.len(), self.limit);
        if len + json.len() > limit {
            return Err(RpcError::too_large());
        }
        match self.sink {
            Sink::Vec(v) => {
                // With the `}` that follows every result (a `Vec` sized to
                // the result alone would double for that byte).
                grow_within(v, json.len() + 1, limit.saturating_add(1));
                v.extend_from_slice(json)
            }
            Sink::Dyn(d) => d.extend_from_slice(json),
        }
        Ok(Done(()))
    }

    /// A value from a parsed message (for instance an upstream response's
    /// `result`), copied byte for byte.
    pub fn raw_json(self, value: RawJson<'_>) -> Result<Done, RpcError> {
        self.raw(value.as_bytes())
    }

    /// Any `Serialize` value, serialized in place with serde_json. Streaming
    /// stops as soon as the result would pass the size limit.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Done, RpcError> {
        let limit = self.limit;
        let outcome = match self.sink {
            Sink::Vec(v) => serialize_into(v, limit, value),
            Sink::Dyn(d) => serialize_into(d, limit, value),
        };
        outcome.map(|()| Done(()))
    }

    /// A JSON string, escaped as needed.
    pub fn str(self, s: &str) -> Result<Done, RpcError> {
        let len = self.len();
        if len + s.len() + 2 > self.limit {
            return Err(RpcError::too_large());
        }
        // Escaping makes a string up to six times longer (`\u0001`): when
        // that could pass the limit, the writes are capped as they go, so
        // the buffer never holds more than the limit.
        if len
            .saturating_add(s.len().saturating_mul(6))
            .saturating_add(2)
            > self.limit
        {
            let limit = self.limit;
            return match self.sink {
                Sink::Vec(v) => capped_string(v, limit, s),
                Sink::Dyn(d) => capped_string(d, limit, s),
            };
        }
        let mut reply = self;
        if let Sink::Vec(v) = &mut reply.sink {
            grow_within(*v, s.len() + 3, reply.limit.saturating_add(1));
        }
        reply.put(|b| b.string(s))
    }

    /// An unsigned integer.
    pub fn u64(self, v: u64) -> Result<Done, RpcError> {
        self.put(|b| b.u64(v))
    }

    /// A signed integer.
    pub fn i64(self, v: i64) -> Result<Done, RpcError> {
        self.put(|b| b.i64(v))
    }

    /// `true` or `false`.
    pub fn bool(self, v: bool) -> Result<Done, RpcError> {
        self.put(|b| b.raw(if v { b"true" } else { b"false" }))
    }

    /// `null`.
    pub fn null(self) -> Result<Done, RpcError> {
        self.put(|b| b.raw(b"null"))
    }

    fn len(&self) -> usize {
        self.sink.len()
    }
}

/// The small writers, object-safe, so [`Reply::put`] is written once for
/// both sinks.
trait ReplyBufExt {
    fn string(&mut self, s: &str);
    fn u64(&mut self, v: u64);
    fn i64(&mut self, v: i64);
    fn raw(&mut self, bytes: &[u8]);
}

impl<B: ReplyBuf + ?Sized> ReplyBufExt for B {
    #[inline(always)]
    fn string(&mut self, s: &str) {
        write::string(self, s)
    }
    #[inline(always)]
    fn u64(&mut self, v: u64) {
        write::u64(self, v)
    }
    #[inline(always)]
    fn i64(&mut self, v: i64) {
        write::i64(self, v)
    }
    #[inline(always)]
    fn raw(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes)
    }
}

#[inline(always)]
fn put_in<B: ReplyBuf + ?Sized>(
    out: &mut B,
    limit: usize,
    f: impl FnOnce(&mut B),
) -> Result<Done, RpcError> {
    let at = out.len();
    f(out);
    if out.len() > limit {
        out.truncate(at);
        return Err(RpcError::too_large());
    }
    Ok(Done(()))
}

/// Makes room for `additional` bytes in a `Vec` without letting its capacity
/// pass `limit` (doubling from 16 MiB would reserve 32 MiB for a 25 MB
/// limit): the buffer never holds more than the limit allows.
#[inline(always)]
pub(crate) fn grow_within<B: ReplyBuf + ?Sized>(out: &mut B, additional: usize, limit: usize) {
    if let Some(v) = out.as_vec_mut()
        && v.capacity() - v.len() < additional
    {
        let len = v.len();
        let want = (len * 2)
            .max(len + additional)
            .max(64)
            .min(limit.max(len + additional));
        v.reserve_exact(want - len);
    }
}

/// [`Reply::str`] for a string whose escaped form may pass `limit`.
fn capped_string<B: ReplyBuf + ?Sized>(
    out: &mut B,
    limit: usize,
    s: &str,
) -> Result<Done, RpcError> {
    let at = out.len();
    let mut capped = Capped::new(out, limit);
    write::string(&mut capped, s);
    if capped.over {
        out.truncate(at);
        return Err(RpcError::too_large());
    }
    Ok(Done(()))
}

/// A reply buffer that takes nothing past `limit` (what would pass it is
/// dropped, and `over` set) and never lets a `Vec` grow past it: for
/// writes whose length is not known before they are made (escaped text,
/// an error's message and `data`).
pub(crate) struct Capped<'o, B: ?Sized> {
    out: &'o mut B,
    limit: usize,
    /// A write was refused: the caller cuts what was written back.
    over: bool,
}

impl<'o, B: ReplyBuf + ?Sized> Capped<'o, B> {
    pub(crate) fn new(out: &'o mut B, limit: usize) -> Self {
        Capped {
            out,
            limit,
            over: false,
        }
    }
}

impl<B: ReplyBuf + ?Sized> ReplyBuf for Capped<'_, B> {
    #[inline]
    fn len(&self) -> usize {
        self.out.len()
    }
    #[inline]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        if self.over || self.out.len() + bytes.len() > self.limit {
            self.over = true;
            return;
        }
        grow_within(self.out, bytes.len(), self.limit);
        self.out.extend_from_slice(bytes);
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        self.out.truncate(len);
    }
    #[inline]
    fn reserve(&mut self, additional: usize) {
        let room = self.limit.saturating_sub(self.out.len());
        grow_within(self.out, additional.min(room), self.limit);
    }
}

/// An `io::Write` over a reply buffer that refuses to grow it past `limit`.
struct Bounded<'o, B: ?Sized> {
    out: &'o mut B,
    limit: usize,
    over: bool,
}

impl<B: ReplyBuf + ?Sized> io::Write for Bounded<'_, B> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.out.len() + buf.len() > self.limit {
            self.over = true;
            return Err(io::ErrorKind::WriteZero.into());
        }
        grow_within(self.out, buf.len(), self.limit);
        self.out.extend_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn serialize_into<B: ReplyBuf + ?Sized, T: Serialize + ?Sized>(
    out: &mut B,
    limit: usize,
    value: &T,
) -> Result<(), RpcError> {
    let at = out.len();
    let mut w = Bounded {
        out,
        limit,
        over: false,
    };
    match serde_json::to_writer(&mut w, value) {
        // A `Serialize` that ignores a refused write (skipping an element
        // that failed) gets `Ok` back with a hole in the text: refused.
        Ok(()) if !w.over => Ok(()),
        Ok(()) => {
            w.out.truncate(at);
            Err(RpcError::too_large())
        }
        Err(e) => {
            let over = w.over;
            w.out.truncate(at);
            Err(if over {
                RpcError::too_large()
            } else {
                RpcError::internal("result could not be serialized").with_data(&Reason {
                    reason: &e.to_string(),
                })
            })
        }
    }
}

#[derive(Serialize)]
pub(crate) struct Reason<'a> {
    pub(crate) reason: &'a str,
}

/// How a handler's return value becomes its reply: `Result<T, E>` where `T`
/// is any `Serialize` value (or the [`Done`] of a [`Reply`] method) and `E`
/// converts into an [`RpcError`] (so `?` works on `std::io::Error`,
/// `serde_json::Error` and the other types `RpcError` converts from).
///
/// A handler that writes through `call.reply`, drops the [`Done`] and then
/// returns a value answers with the value: what was written first is taken
/// back, so the reply never holds two results.
pub trait IntoResponse {
    /// Whether a successful `self` is a [`Done`], i.e. the result is
    /// already written through the call's own [`Reply`]. When it is not,
    /// anything a handler wrote before returning is taken back first.
    #[doc(hidden)]
    const WRITTEN_BY_HANDLER: bool = false;
    /// Writes the result through `reply`, or returns the error to answer
    /// with.
    fn into_response(self, reply: Reply<'_>) -> Result<Done, RpcError>;
}

/// A successful result: any `Serialize` value, or [`Done`].
pub trait IntoResult {
    /// Whether `self` is a [`Done`]: see [`IntoResponse`].
    #[doc(hidden)]
    const WRITTEN_BY_HANDLER: bool = false;
    /// Writes `self` as the `result` member.
    fn write_result(self, reply: Reply<'_>) -> Result<Done, RpcError>;
}

impl<T: Serialize> IntoResult for T {
    #[inline]
    fn write_result(self, reply: Reply<'_>) -> Result<Done, RpcError> {
        reply.json(&self)
    }
}

impl IntoResult for Done {
    const WRITTEN_BY_HANDLER: bool = true;
    #[inline(always)]
    fn write_result(self, _: Reply<'_>) -> Result<Done, RpcError> {
        Ok(self)
    }
}

impl<T: IntoResult, E: Into<RpcError>> IntoResponse for Result<T, E> {
    const WRITTEN_BY_HANDLER: bool = T::WRITTEN_BY_HANDLER;
    #[inline(always)]
    fn into_response(self, reply: Reply<'_>) -> Result<Done, RpcError> {
        match self {
            Ok(value) => value.write_result(reply),
            Err(e) => Err(e.into()),
        }
    }
}

/// The fixed texts of the "response too large" reply, made once per
/// dispatcher so that its length for any id is known in advance.
#[derive(Clone, Debug)]
pub(crate) struct TooLarge {
    code: i32,
    /// `,"error":{"code":…,"message":"Response too large","data":{"limit":…}}}`
    tail: std::sync::Arc<[u8]>,
}

impl TooLarge {
    pub(crate) fn new(code: i32, limit: usize) -> Self {
        let mut tail = Vec::with_capacity(96);
        tail.extend_from_slice(b",\"error\":{\"code\":");
        write::i64(&mut tail, code as i64);
        tail.extend_from_slice(b",\"message\":\"Response too large\",\"data\":{\"limit\":");
        write::u64(&mut tail, limit as u64);
        tail.extend_from_slice(b"}}}");
        TooLarge {
            code,
            tail: tail.into(),
        }
    }

    /// The error code.
    pub(crate) fn code(&self) -> i32 {
        self.code
    }

    /// The length of the reply for `id`.
    #[inline]
    pub(crate) fn len_for(&self, id: Id<'_>) -> usize {
        HEAD_PREFIX.len() + id.as_bytes().len() + self.tail.len()
    }

    pub(crate) fn write<B: ReplyBuf + ?Sized>(&self, out: &mut B, id: Id<'_>) {
        out.extend_from_slice(HEAD_PREFIX);
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&self.tail);
    }
}

/// How much of the response size limit a message's reply has used, and how
/// much it holds back.
///
/// Before anything runs, the budget reserves for every entry that will be
/// answered the length of its "response too large" reply (known exactly:
/// ids are bounded by the parser's id limit), plus a separator each and the
/// closing bracket of a batch. Each entry may then use what is neither used
/// nor reserved for the others; a reply that does not fit its allowance is
/// replaced by its too-large reply, which always fits. So the whole reply
/// never exceeds the limit, and no handler can make the buffer grow past it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    limit: usize,
    used: usize,
    reserved: usize,
    /// 1 in a batch (a `[` or `,` before each reply), else 0.
    separator: usize,
    /// An entry has already been refused: every entry not run yet is too
    /// (an async call already running keeps its reply if it fits).
    over: bool,
}

impl Budget {
    pub(crate) fn new(limit: usize, batch: bool) -> Self {
        Budget {
            limit,
            used: 0,
            // A batch's closing `]`.
            reserved: batch as usize,
            separator: batch as usize,
            over: false,
        }
    }

    /// The response size limit.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Holds back room for one entry that will be answered.
    #[inline]
    pub(crate) fn hold(&mut self, too_large_len: usize) {
        self.reserved += too_large_len + self.separator;
    }

    /// Whether every entry can at least get its too-large reply.
    pub(crate) fn feasible(&self) -> bool {
        self.reserved <= self.limit
    }

    /// Whether an earlier entry was refused (then this one is not run).
    pub(crate) fn is_over(&self) -> bool {
        self.over
    }

    /// How many bytes the reply (without separator) to an entry holding
    /// `too_large_len` may take: what is neither used nor held for the other
    /// entries. Never less than `too_large_len`.
    #[inline]
    pub(crate) fn allowance(&self, too_large_len: usize) -> usize {
        let others = self.reserved - (too_large_len + self.separator);
        self.limit
            .saturating_sub(self.used + others + self.separator)
            .max(too_large_len)
    }

    /// Records the reply of `len` bytes to an entry that held
    /// `too_large_len`; `refused` if it was replaced by its too-large reply.
    #[inline]
    pub(crate) fn commit(&mut self, too_large_len: usize, len: usize, outcome: Outcome) {
        self.reserved -= too_large_len + self.separator;
        self.used += len + self.separator;
        self.over |= outcome.refused();
    }
}

/// What an entry was answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A result.
    Result,
    /// An error with this code.
    Error(i32),
    /// The too-large error, in place of a reply past its allowance.
    TooLarge,
}

impl Outcome {
    /// Whether the reply was refused as too large.
    #[inline]
    pub(crate) fn refused(self) -> bool {
        self == Outcome::TooLarge
    }
}

const HEAD_PREFIX: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";
const RESULT_KEY: &[u8] = b",\"result\":";

/// Writes the complete reply to one request at the end of `out`, in at most
/// `allowance` bytes: the head, then what `run` writes through the
/// [`Reply`] it makes over the sink and limit it is given, then `}`; or, if
/// `run` fails, an error object in place of the result; or, if that does not
/// fit, the too-large reply. Returns the reply's length and whether it was
/// refused as too large.
#[inline(always)]
pub(crate) fn write_reply<B: ReplyBuf>(
    out: &mut B,
    id: Id<'_>,
    allowance: usize,
    too_large: &TooLarge,
    run: impl FnOnce(&mut Sink<'_>, usize) -> Result<Done, RpcError>,
) -> (usize, Outcome) {
    match poll_reply(out, id, allowance, too_large, |sink, limit| {
        std::task::Poll::Ready(run(sink, limit))
    }) {
        std::task::Poll::Ready(written) => written,
        std::task::Poll::Pending => unreachable!("run is always ready"),
    }
}

/// [`write_reply`] for a result that may not be ready: when `run` is
/// pending, nothing is left in `out`.
#[inline(always)]
pub(crate) fn poll_reply<B: ReplyBuf>(
    out: &mut B,
    id: Id<'_>,
    allowance: usize,
    too_large: &TooLarge,
    run: impl FnOnce(&mut Sink<'_>, usize) -> std::task::Poll<Result<Done, RpcError>>,
) -> std::task::Poll<(usize, Outcome)> {
    let start = out.len();
    out.extend_from_slice(HEAD_PREFIX);
    write::small(out, id.as_bytes());
    let after_id = out.len();
    out.extend_from_slice(RESULT_KEY);
    // Room for the closing brace. Saturating: without a response limit
    // (`usize::MAX`) the allowance is as large, and `out` need not start
    // empty (rpcwire's HTTP/1.1 loop keeps room for the head in front).
    let limit = start.saturating_add(allowance).saturating_sub(1);
    // The sink by reference down to the handler: passed by value, it was
    // copied at each call in one 16-byte load over the two 8-byte stores
    // that had just written it, a load that waited for them.
    let e = match run(&mut Sink::of(out), limit) {
        std::task::Poll::Pending => {
            out.truncate(start);
            return std::task::Poll::Pending;
        }
        // A `Done` is `'static`: one kept from another call proves nothing
        // was written here, and `"result":}` is no JSON.
        std::task::Poll::Ready(Ok(Done(()))) if out.len() == after_id + RESULT_KEY.len() => {
            RpcError::internal("the handler returned without writing a result")
        }
        std::task::Poll::Ready(Ok(Done(()))) => {
            // A result that filled its allowance leaves the buffer full.
            grow_within(out, 1, limit.saturating_add(1));
            out.push(b'}');
            return std::task::Poll::Ready((out.len() - start, Outcome::Result));
        }
        std::task::Poll::Ready(Err(e)) => e,
    };
    out.truncate(after_id);
    // The error's message and `data` are the handler's, of any size:
    // written capped, so that one past the allowance is never buffered
    // whole.
    let mut capped = Capped::new(&mut *out, start.saturating_add(allowance));
    if let Some(object) = e.raw_object() {
        capped.extend_from_slice(b",\"error\":");
        capped.extend_from_slice(object);
        capped.push(b'}');
    } else if !e.is_too_large() {
        write_error_tail(
            &mut capped,
            e.code(),
            e.message(),
            e.data().map(str::as_bytes),
        );
    } else {
        capped.over = true;
    }
    if !capped.over {
        return std::task::Poll::Ready((out.len() - start, Outcome::Error(e.code())));
    }
    out.truncate(start);
    too_large.write(out, id);
    std::task::Poll::Ready((out.len() - start, Outcome::TooLarge))
}

/// Writes an error reply (not a handler's) in at most `allowance` bytes,
/// falling back to the too-large reply. Returns its length and whether it
/// was refused.
pub(crate) fn write_error_reply<B: ReplyBuf + ?Sized>(
    out: &mut B,
    id: Id<'_>,
    allowance: usize,
    too_large: &TooLarge,
    code: i32,
    tail: impl FnOnce(&mut Capped<'_, B>),
) -> (usize, Outcome) {
    let start = out.len();
    out.extend_from_slice(HEAD_PREFIX);
    out.extend_from_slice(id.as_bytes());
    // Capped: an unknown method's name is the client's, of any length.
    let mut capped = Capped::new(&mut *out, start.saturating_add(allowance));
    tail(&mut capped);
    if !capped.over {
        return (out.len() - start, Outcome::Error(code));
    }
    out.truncate(start);
    too_large.write(out, id);
    (out.len() - start, Outcome::TooLarge)
}

/// `,"error":{…}}` after `{"jsonrpc":"2.0","id":<id>`.
pub(crate) fn write_error_tail<B: ReplyBuf + ?Sized>(
    out: &mut B,
    code: i32,
    message: &str,
    data: Option<&[u8]>,
) {
    out.extend_from_slice(b",\"error\":{\"code\":");
    write::i64(out, code as i64);
    out.extend_from_slice(b",\"message\":");
    write::string(out, message);
    if let Some(data) = data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data);
    }
    out.extend_from_slice(b"}}");
}

/// The error tail for a parse or envelope error, its `data` written in
/// place.
pub(crate) fn write_request_error_tail<B: ReplyBuf + ?Sized>(out: &mut B, e: Error) {
    out.extend_from_slice(b",\"error\":{\"code\":");
    write::i64(out, e.code() as i64);
    out.extend_from_slice(b",\"message\":\"");
    out.extend_from_slice(e.message().as_bytes());
    out.extend_from_slice(b"\",\"data\":");
    e.write_data(out);
    out.extend_from_slice(b"}}");
}

/// The most bytes an unknown-method error writes of the name in
/// `data.method` (between its quotes, escapes counted); a longer name is
/// cut at a character boundary and `data.truncated` is `true`. Echoed
/// whole, a long name (its control characters written as six-byte
/// escapes) made the -32601 larger than a small response limit: the
/// client got "Response too large" instead, and in a batch the entries
/// after it were not run.
pub(crate) const MAX_ECHOED_METHOD: usize = 256;

/// Where `text` is cut so that at most `max` bytes of it are written
/// as a JSON string's content (escapes counted), at a character boundary;
/// `None` when it fits whole.
pub(crate) fn echo_cut(text: &str, max: usize) -> Option<usize> {
    let mut written = 0;
    let mut cut = text.bytes().position(|b| {
        written += write::escaped_len(b);
        written > max
    })?;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(cut)
}

/// The error tail for an unknown method, naming it in `data`.
pub(crate) fn write_method_not_found_tail<B: ReplyBuf + ?Sized>(out: &mut B, method: &str) {
    out.extend_from_slice(b",\"error\":{\"code\":");
    write::i64(out, METHOD_NOT_FOUND as i64);
    out.extend_from_slice(b",\"message\":\"Method not found\",\"data\":{\"method\":");
    match echo_cut(method, MAX_ECHOED_METHOD) {
        None => {
            write::string(out, method);
            out.extend_from_slice(b"}}}");
        }
        Some(cut) => {
            write::string(out, &method[..cut]);
            out.extend_from_slice(b",\"truncated\":true}}}");
        }
    }
}
