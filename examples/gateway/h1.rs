//! A small HTTP/1.1 client for JSON-RPC upstreams: a pool of kept-alive
//! connections, each exchange (one write, reads until the reply is whole)
//! run inside the calling future.
//!
//! Why not only hyper-util's pooled client (`--client hyper` selects it):
//! that client hands every request to a connection task over a channel,
//! gets the reply and its body back over two more, looks the pool up by a
//! hashed key under a lock, and spawns a task per request to return the
//! connection to the pool. On the load test that cost about 12 µs of user
//! CPU per forwarded request; this one does the same work without the
//! tasks and channels (see the README's gateway figures).
//!
//! It speaks exactly what a JSON-RPC upstream needs: `POST` with a
//! `Content-Length` body; replies with `Content-Length`, `chunked`, or
//! delimited by the close; `Connection: close` honoured. Response heads are
//! read in one pass when written the plain way nodes write them
//! ([`read_plain_fields`]), by httparse (hyper's parser) otherwise.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rpcwire::bytes::{Buf, Bytes, BytesMut};
use rpcwire::server::http::read_plain_fields;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::upstream::Decimal;

/// At most this many idle connections are kept per worker.
const POOL_CAP: usize = 1024;
/// Replies up to this size are read where they lie in the connection's
/// buffer (only the part kept is copied out); larger ones are split off it
/// without a copy.
const SMALL: usize = 16 * 1024;

/// A new connection's buffer's size.
const START_BUFFER: usize = 8192;
/// A connection's buffer grown past this (by a large request, or a large
/// chunk of a reply) is not kept with the idle connection: the pool, up to
/// [`POOL_CAP`] connections per worker, would hold on to that much for
/// each.
const KEPT_BUFFER: usize = 64 * 1024;

/// A chunk-size line (the size, its extensions) longer than this is
/// refused: nothing else bounds how much of a line that never ends is
/// buffered (hyper allows 16 KiB of extensions in a whole body).
const MAX_CHUNK_LINE: usize = 4096;
/// Interim (1xx) replies skipped before the final one; past this many the
/// reply is refused rather than read until the call's timeout.
const MAX_INTERIM: usize = 32;
/// A reply's body is not reserved in the connection's buffer past this
/// before its bytes arrive: a `Content-Length` is the upstream's word, and
/// the limit may be as high as 1 TiB (no limit).
const MAX_RESERVE: usize = 1 << 20;

/// Header lines a reply head may have (hyper's limit: replies through CDNs
/// and load balancers carry dozens).
pub(crate) const MAX_HEADERS: usize = 100;

/// What went wrong with an exchange.
#[derive(Debug)]
pub enum H1Error {
    /// No connection could be made: nothing was sent.
    Connect(io::Error),
    /// The reply is larger than the limit.
    TooLarge,
    /// The connection failed or the reply could not be read.
    Other(String),
}

thread_local! {
    /// The worker this thread runs (0 for the main thread's runtime).
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Says which worker runs on this thread: each worker reuses only the
/// connections it made. A socket answers through the reactor of the
/// runtime that registered it, so a connection made on one worker's
/// one-thread runtime and reused from another wakes two threads per
/// reply instead of one (at one client connection that cost about 25 µs
/// of latency per forwarded request).
pub fn set_worker(index: usize) {
    WORKER.with(|w| w.set(index));
}

/// One upstream's connections.
pub struct H1Pool {
    authority: String,
    /// `POST <path> HTTP/1.1`, `Host`, `Content-Type` and the start of
    /// `Content-Length: `.
    head: Vec<u8>,
    /// Idle connections, per worker ([`set_worker`]), the most recently
    /// used at the back (taken first), the longest idle at the front.
    idle: Mutex<Vec<VecDeque<Conn>>>,
    /// How long a new connection's TCP connect may take: an upstream
    /// that drops connection attempts silently fails the attempt at this
    /// deadline (the caller moves on to the next upstream), not at the
    /// call's.
    connect_timeout: Duration,
    /// A pooled connection left idle this long (`--upstream-idle`) is
    /// closed rather than reused: servers close idle connections (geth
    /// after 120 s), and one closed under a request costs a retry.
    max_idle: Duration,
}

struct Conn {
    stream: TcpStream,
    /// The request as it is written, then the reply as it is read: one
    /// buffer, reused by every exchange on the connection (it goes with
    /// the connection, so a call dropped half-way, whose connection is
    /// dropped too, leaves nothing in it for a later call).
    buf: BytesMut,
    since: Instant,
}

/// A reply's body, as [`H1Pool::post`]'s reader sees it.
pub enum Body<'a> {
    /// Still in the connection's buffer (a small reply): what is kept of
    /// it is copied out, one allocation for the part kept instead of one
    /// for the whole body and one more to share it.
    InPlace(&'a [u8]),
    /// A body of its own (a large reply split off the buffer, a chunked
    /// one, a WebSocket message): what is kept of it is a shared slice.
    Shared(&'a Bytes),
}

impl Body<'_> {
    /// The body's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Body::InPlace(b) => b,
            Body::Shared(b) => b,
        }
    }

    /// `part`, a slice of [`bytes`](Body::bytes), as bytes of its own.
    pub fn keep(&self, part: &[u8]) -> Bytes {
        match self {
            Body::InPlace(_) => Bytes::copy_from_slice(part),
            Body::Shared(b) => b.slice_ref(part),
        }
    }
}

/// Where [`exchange`] left a reply's body.
enum BodyAt {
    /// The first `len` bytes of the connection's buffer.
    Buffer(usize),
    /// Apart from it: split off it (a large reply, one read to the close),
    /// or gathered from its chunks.
    Split(Bytes),
}

impl H1Pool {
    /// For `http://host:port/path`.
    pub fn new(url: &str, connect_timeout: Duration, max_idle: Duration) -> Result<H1Pool, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("not an http:// URL: {}", crate::config::shown_url(url)))?;
        // The authority ends at the path, the query or the fragment (a key
        // in the query, `http://host:8545?key=…`, must not become part of
        // the address); the fragment is not sent.
        let rest = rest.split('#').next().unwrap_or(rest);
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'?' => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        if authority.contains('@') {
            return Err(format!(
                "user info in upstream URLs is not supported: {}",
                crate::config::shown_url(url)
            ));
        }
        // A port is a colon after the host; an IPv6 literal's colons are
        // inside its brackets (`[::1]` once failed as a bad port).
        let host_end = authority.rfind(']').map_or(0, |i| i + 1);
        let authority = if authority[host_end..].contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: "
        )
        .into_bytes();
        Ok(H1Pool {
            authority,
            head,
            idle: Mutex::new(Vec::new()),
            connect_timeout,
            max_idle,
        })
    }

    /// Puts the request for the body `write_body` writes in `buf` (emptied
    /// first); returns where in `buf` it starts. The body is written first,
    /// after room for the longest head, and the head (whose length it
    /// gives) right before it: the request is built once, in place.
    fn put_request(&self, buf: &mut BytesMut, write_body: impl Fn(&mut BytesMut)) -> usize {
        let room = self.head.len() + 20 + 4;
        buf.clear();
        buf.resize(room, 0);
        write_body(buf);
        let length = Decimal::new((buf.len() - room) as u64);
        let digits = length.as_bytes();
        let start = room - (self.head.len() + digits.len() + 4);
        let mut put = start;
        for part in [&self.head[..], digits, b"\r\n\r\n"] {
            buf[put..put + part.len()].copy_from_slice(part);
            put += part.len();
        }
        start
    }

    /// This worker's idle connections, under the pool's lock.
    fn with_idle<R>(&self, f: impl FnOnce(&mut VecDeque<Conn>) -> R) -> R {
        let worker = WORKER.with(Cell::get);
        let mut all = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if all.len() <= worker {
            all.resize_with(worker + 1, VecDeque::new);
        }
        f(&mut all[worker])
    }

    /// A pooled connection that is still open: one the server closed
    /// while it waited (its end already read, which the reactor reports,
    /// so the check costs no system call) is dropped here, before anything
    /// is sent on it.
    fn checkout(&self, now: Instant) -> Option<Conn> {
        self.with_idle(|idle| {
            while let Some(conn) = idle.pop_back() {
                if self.reusable(&conn, now) {
                    return Some(conn);
                }
            }
            None
        })
    }

    /// Whether `conn`, idle, may still be used at `now`: not idle too
    /// long, and with nothing to read (an end, or bytes nobody asked
    /// for, rule it out). The read costs no system call unless the
    /// reactor saw the socket readable.
    fn reusable(&self, conn: &Conn, now: Instant) -> bool {
        now.saturating_duration_since(conn.since) < self.max_idle
            && matches!(
                conn.stream.try_read(&mut [0u8; 1]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock
            )
    }

    /// Closes this worker's idle connections that are idle too long or
    /// that the server closed. Checkouts and checkins do it as traffic
    /// comes; this is for when it stops: a pool of a burst's connections
    /// otherwise kept every socket (in `CLOSE_WAIT` once the server's own
    /// idle limit closed its end) until the next request.
    pub fn reap(&self, now: Instant) {
        self.with_idle(|idle| idle.retain(|conn| self.reusable(conn, now)));
    }

    /// Keeps `conn` for reuse; `now` is when its exchange started (its
    /// idle time is counted from then: a little early, never late).
    fn checkin(&self, mut conn: Conn, now: Instant) {
        conn.since = now;
        if conn.buf.capacity() > KEPT_BUFFER {
            conn.buf = BytesMut::with_capacity(START_BUFFER);
        }
        self.with_idle(|idle| {
            // Connections left idle past `max_idle` are closed from the
            // front, where the longest idle wait: taken last-in first-out,
            // those left at the bottom after a burst would otherwise keep
            // their sockets (and buffers) for as long as the pool lives.
            while idle
                .front()
                .is_some_and(|c| now.saturating_duration_since(c.since) >= self.max_idle)
            {
                idle.pop_front();
            }
            if idle.len() < POOL_CAP {
                idle.push_back(conn);
            }
        });
    }

    /// POSTs the body (JSON) `write_body` writes and reads the reply, at
    /// most `max` bytes of body; returns what `read` makes of the reply's
    /// status and body. `read` runs before the connection goes back to the
    /// pool, so that a small reply is read where it lies in the
    /// connection's buffer. A request is sent again (once, on a new
    /// connection) only when writing it failed on a kept-alive connection
    /// the server had closed: a request that was written may have been
    /// read, and a call that may have reached the upstream is never sent
    /// twice (it may be a transaction). A connection that ends after the
    /// request was written, with nothing back, is an error for that call.
    pub async fn post<R>(
        &self,
        write_body: impl Fn(&mut BytesMut),
        max: usize,
        now: Instant,
        read: impl FnOnce(u16, Body<'_>) -> R,
    ) -> Result<R, H1Error> {
        for _ in 0..2 {
            let (mut conn, reused) = match self.checkout(now) {
                Some(c) => (c, true),
                None => {
                    let connect = TcpStream::connect(&self.authority);
                    let stream = tokio::time::timeout(self.connect_timeout, connect)
                        .await
                        .map_err(|_| {
                            H1Error::Connect(io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!(
                                    "no connection within {} ms",
                                    self.connect_timeout.as_millis()
                                ),
                            ))
                        })?
                        .map_err(H1Error::Connect)?;
                    let _ = stream.set_nodelay(true);
                    let conn = Conn {
                        stream,
                        buf: BytesMut::with_capacity(START_BUFFER),
                        since: now,
                    };
                    (conn, false)
                }
            };
            // Built in the connection's buffer (again on a new connection
            // when the pooled one was found closed).
            let start = self.put_request(&mut conn.buf, &write_body);
            match exchange(&mut conn, start, max).await {
                Ok((status, body, keep)) => {
                    let outcome = match body {
                        BodyAt::Buffer(len) => read(status, Body::InPlace(&conn.buf[..len])),
                        BodyAt::Split(body) => read(status, Body::Shared(&body)),
                    };
                    if keep {
                        self.checkin(conn, now);
                    }
                    return Ok(outcome);
                }
                Err(Exchange::Stale) if reused => {
                    // The server closed its idle connections: the others
                    // pooled with this one are likely closed too.
                    self.with_idle(VecDeque::clear);
                    continue;
                }
                Err(Exchange::Stale) => {
                    return Err(H1Error::Other(
                        "the connection closed before any reply".into(),
                    ));
                }
                Err(Exchange::Failed(e)) => return Err(e),
            }
        }
        Err(H1Error::Other(
            "the connection closed before any reply".into(),
        ))
    }
}

pub(crate) enum Exchange {
    /// Nothing came back at all (a kept-alive connection the server closed).
    Stale,
    Failed(H1Error),
}

fn failed(reason: impl Into<String>) -> Exchange {
    Exchange::Failed(H1Error::Other(reason.into()))
}

/// Reads more into the buffer; `false` at the end of the stream.
async fn fill(conn: &mut Conn) -> Result<bool, Exchange> {
    if conn.buf.capacity() - conn.buf.len() < 4096 {
        conn.buf.reserve(16 * 1024);
    }
    match conn.stream.read_buf(&mut conn.buf).await {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) => Err(failed(format!("connection lost: {e}"))),
    }
}

/// One request (in the connection's buffer from `start` on) and its
/// reply: its status, where its body is, and whether the connection may be
/// reused.
async fn exchange(
    conn: &mut Conn,
    start: usize,
    max: usize,
) -> Result<(u16, BodyAt, bool), Exchange> {
    let written = conn.stream.write_all(&conn.buf[start..]).await;
    conn.buf.clear();
    // A server may answer before it has read the whole request and stop
    // reading (geth's 413 on the Content-Length, then a reset): the write
    // fails, and the answer is in the socket's receive queue. Only when
    // nothing came back did the server close without answering.
    let answered_early = match written {
        Ok(()) => false,
        Err(e) => match fill(conn).await {
            Ok(true) => true,
            _ => {
                return Err(match e.kind() {
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Exchange::Stale,
                    _ => failed(format!("connection lost: {e}")),
                });
            }
        },
    };
    // The head.
    let Head {
        status,
        len: head_len,
        framing,
        mut close,
    } = {
        let mut interim = 0;
        loop {
            match parse_head(&conn.buf)? {
                Some(head) if (100..200).contains(&head.status) => {
                    // An interim reply (100 Continue): skip it.
                    interim += 1;
                    if interim > MAX_INTERIM {
                        return Err(failed(format!(
                            "more than {MAX_INTERIM} interim (1xx) replies"
                        )));
                    }
                    conn.buf.advance(head.len);
                }
                Some(head) => break head,
                None => {
                    if conn.buf.len() > 64 * 1024 {
                        return Err(failed("a reply head larger than 64 KiB"));
                    }
                    let had = !conn.buf.is_empty();
                    if !fill(conn).await? {
                        return Err(failed(if had {
                            "the connection closed in the middle of the reply"
                        } else {
                            "the connection closed before any reply"
                        }));
                    }
                }
            }
        }
    };
    conn.buf.advance(head_len);
    // The rest of the request is still unread by the server: the
    // connection cannot carry another.
    close |= answered_early;
    let too_large = || Exchange::Failed(H1Error::TooLarge);
    let cut = || failed("the connection closed in the middle of the reply");
    let body = match framing {
        Framing::Length(len) => {
            if len > max {
                return Err(too_large());
            }
            while conn.buf.len() < len {
                // Grown as the bytes come (doubling), not all at once on
                // the upstream's word.
                conn.buf.reserve((len - conn.buf.len()).min(MAX_RESERVE));
                if !fill(conn).await? {
                    return Err(cut());
                }
            }
            if len <= SMALL {
                // Left in place: the connection's buffer stays unshared,
                // reused as it is by the next exchange (which empties it).
                let keep = !close && conn.buf.len() == len;
                return Ok((status, BodyAt::Buffer(len), keep));
            }
            let body = conn.buf.split_to(len).freeze();
            // What is left of the buffer shares the reply's allocation
            // (its capacity reads small): a pooled connection keeping it
            // would keep the whole reply alive while it waits. Anything
            // left in it (bytes past the reply) keeps the connection from
            // reuse anyway.
            if conn.buf.is_empty() {
                conn.buf = BytesMut::with_capacity(START_BUFFER);
            }
            BodyAt::Split(body)
        }
        Framing::Chunked => {
            let mut body = BytesMut::new();
            loop {
                match httparse::parse_chunk_size(&conn.buf) {
                    Ok(httparse::Status::Complete((n, size))) => {
                        // A size past the limit is refused before any sum
                        // with it (a hostile 2^64 - 1 would overflow).
                        let size = usize::try_from(size).unwrap_or(usize::MAX);
                        if size > max.saturating_sub(body.len()) {
                            return Err(too_large());
                        }
                        // The chunk and its CRLF.
                        while conn.buf.len() < n + size + 2 {
                            if !fill(conn).await? {
                                return Err(cut());
                            }
                        }
                        conn.buf.advance(n);
                        if conn.buf[size..size + 2] != *b"\r\n" {
                            if size == 0 {
                                // Trailers: the body is whole; what is left
                                // unread keeps the connection from reuse.
                                break;
                            }
                            // The data ends at CRLF, or the size was wrong
                            // (the two bytes were once skipped unread).
                            return Err(failed("a bad chunk in the reply"));
                        }
                        body.extend_from_slice(&conn.buf[..size]);
                        conn.buf.advance(size + 2);
                        if size == 0 {
                            break;
                        }
                    }
                    Ok(httparse::Status::Partial) => {
                        if conn.buf.len() > MAX_CHUNK_LINE {
                            return Err(failed(format!(
                                "a chunk-size line longer than {MAX_CHUNK_LINE} bytes"
                            )));
                        }
                        if !fill(conn).await? {
                            return Err(cut());
                        }
                    }
                    Err(_) => return Err(failed("a bad chunk in the reply")),
                }
            }
            // The chunks went through the connection's buffer, which grew
            // for the largest and was consumed from the front: its
            // capacity reads small, so the pool's check of oversized
            // buffers would not see it.
            if body.len() > SMALL && conn.buf.is_empty() {
                conn.buf = BytesMut::with_capacity(START_BUFFER);
            }
            BodyAt::Split(body.freeze())
        }
        Framing::Close => {
            while fill(conn).await? {
                if conn.buf.len() > max {
                    return Err(too_large());
                }
            }
            return Ok((status, BodyAt::Split(conn.buf.split().freeze()), false));
        }
    };
    let keep = !close && conn.buf.is_empty();
    Ok((status, body, keep))
}

/// What the exchange needs from a reply's head.
pub(crate) struct Head {
    pub(crate) status: u16,
    /// The head's length, blank line included.
    pub(crate) len: usize,
    pub(crate) framing: Framing,
    pub(crate) close: bool,
}

/// Parses a reply head, `None` while it is incomplete: the plain shape
/// nodes write in one pass ([`read_plain_head`]), any other by httparse.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<Head>, Exchange> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut fields = HeadFields::new(false);
    if let Some((status, len)) = read_plain_head(buf, |name, value| fields.take(name, value)) {
        return fields.finish(status, len).map(Some);
    }
    parse_head_httparse(buf)
}

/// [`parse_head`] by httparse alone. A plain function, so that httparse's
/// header array lives on the stack, not in every exchange's future (which
/// is boxed and moved per call).
pub(crate) fn parse_head_httparse(buf: &[u8]) -> Result<Option<Head>, Exchange> {
    // Left uninitialized: httparse writes the ones it returns.
    let mut headers = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(failed(format!("not an HTTP reply: {e}"))),
    };
    let mut fields = HeadFields::new(response.version == Some(0));
    for h in response.headers.iter() {
        fields.take(h.name.as_bytes(), h.value);
        if fields.error.is_some() {
            break;
        }
    }
    fields.finish(response.code.unwrap_or(0), len).map(Some)
}

/// What a reply head's fields say about its body and its connection, read
/// one field at a time.
struct HeadFields {
    framing: Framing,
    close: bool,
    /// The first field that makes the reply unreadable: the rest are not
    /// read.
    error: Option<&'static str>,
}

impl HeadFields {
    fn new(close: bool) -> Self {
        HeadFields {
            framing: Framing::Close,
            close,
            error: None,
        }
    }

    #[inline]
    fn take(&mut self, name: &[u8], value: &[u8]) {
        if self.error.is_some() {
            return;
        }
        // Lengths first: most headers are none of these three.
        if name.len() == 14 && name.eq_ignore_ascii_case(b"content-length") {
            let Some(len) = digits(value) else {
                self.error = Some("a bad Content-Length");
                return;
            };
            // With `Transfer-Encoding: chunked` too, chunked rules, the
            // order of the two aside (RFC 9112 6.3; the later header once
            // won), and the connection, whose framing is in doubt, closes.
            match self.framing {
                Framing::Chunked => self.close = true,
                // Two lengths that differ: which one frames the body is
                // anyone's guess (the last one once won).
                Framing::Length(before) if before != len => {
                    self.error = Some("two different Content-Length values");
                }
                _ => self.framing = Framing::Length(len),
            }
        } else if name.len() == 17 && name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Only `chunked` is read: a body with another transfer coding
            // (`gzip, chunked`) cannot be, and one not ending in `chunked`
            // would be read to the close, which a kept-alive upstream
            // never sends (the call waited out its timeout).
            if !value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                self.error = Some("a Transfer-Encoding other than chunked");
                return;
            }
            self.close = self.close || matches!(self.framing, Framing::Length(_));
            self.framing = Framing::Chunked;
        } else if name.len() == 10 && name.eq_ignore_ascii_case(b"connection") {
            // A list of tokens (`keep-alive, close`), `close` among them.
            self.close = self.close
                || value
                    .split(|b| *b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
    }

    /// The head of `len` bytes with `status` these fields make.
    fn finish(self, status: u16, len: usize) -> Result<Head, Exchange> {
        if let Some(reason) = self.error {
            return Err(failed(reason));
        }
        // 204 and 304 have no body whatever the headers say (RFC 9112
        // 6.3): read on to the close, the call waited out its timeout.
        let framing = match status {
            204 | 304 => Framing::Length(0),
            _ => self.framing,
        };
        Ok(Head {
            status,
            len,
            framing,
            close: self.close,
        })
    }
}

/// Reads a reply head written the way nodes write it (`HTTP/1.1`, a
/// status, a reason of visible ASCII, then fields as
/// [`read_plain_fields`] reads them), handing each field to `field` in
/// order, as httparse reads it; returns the status and the head's length.
/// `None` for a head of any other shape or not yet whole: httparse reads it
/// from the start (fields handed over are to be forgotten). The tests hold
/// it to httparse's reading on every byte at every position of real
/// nodes' heads. Callgrind, under the load test: the reply head went from
/// about 1,770 instructions a forwarded request to 1,520.
#[inline]
pub(crate) fn read_plain_head<'b>(
    buf: &'b [u8],
    field: impl FnMut(&'b [u8], &'b [u8]),
) -> Option<(u16, usize)> {
    let line = buf.get(..13)?;
    let code = &line[9..12];
    if !line.starts_with(b"HTTP/1.1 ") || !code.iter().all(u8::is_ascii_digit) || line[12] != b' ' {
        return None;
    }
    let status = code.iter().fold(0, |n, &d| n * 10 + u16::from(d - b'0'));
    // The reason: a few words.
    let reason = buf[13..]
        .iter()
        .position(|&b| !matches!(b, b'\t' | b' '..=b'~'))?
        + 13;
    if buf[reason] != b'\r' || *buf.get(reason + 1)? != b'\n' {
        return None;
    }
    let len = read_plain_fields(buf, reason + 2, MAX_HEADERS, field)?;
    Some((status, len))
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// A `Content-Length` value (httparse trimmed its blanks): digits only
/// (RFC 9110 8.6), no overflow. `str::parse` once took `+5`, and values
/// ending in Unicode blanks such as U+00A0, which `str::trim` removed.
fn digits(value: &[u8]) -> Option<usize> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0usize, |n, &b| {
        let digit = b.is_ascii_digit().then(|| usize::from(b - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_IDLE: Duration = crate::config::DEFAULT_UPSTREAM_IDLE;

    /// Connections idle past `max_idle` are closed as others are pooled,
    /// not only when they are taken: the pool is taken from the top, and
    /// those left at the bottom after a burst kept their sockets (and
    /// buffers) for as long as the pool lived.
    #[tokio::test]
    async fn connections_idle_too_long_are_closed_as_others_are_pooled() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let pool =
            H1Pool::new(&format!("http://{addr}/"), Duration::from_secs(2), MAX_IDLE).unwrap();
        let conn = || async {
            Conn {
                stream: TcpStream::connect(addr).await.unwrap(),
                buf: BytesMut::new(),
                since: Instant::now(),
            }
        };
        let start = Instant::now();
        pool.checkin(conn().await, start);
        pool.checkin(conn().await, start + Duration::from_secs(1));
        let nearly = MAX_IDLE - Duration::from_millis(1);
        pool.checkin(conn().await, start + nearly);
        assert_eq!(
            pool.with_idle(|idle| idle.len()),
            3,
            "none idle long enough yet"
        );
        pool.checkin(conn().await, start + MAX_IDLE + Duration::from_millis(1500));
        assert_eq!(
            pool.with_idle(|idle| idle.len()),
            2,
            "the two oldest closed"
        );
    }

    /// With no traffic, `reap` closes what checkouts and checkins would
    /// have: connections the server closed (at once) and connections idle
    /// too long (at their limit), keeping the others.
    #[tokio::test]
    async fn reaping_closes_closed_and_expired_connections_without_traffic() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool =
            H1Pool::new(&format!("http://{addr}/"), Duration::from_secs(2), MAX_IDLE).unwrap();
        let start = Instant::now();
        let mut served = Vec::new();
        for _ in 0..3 {
            let stream = TcpStream::connect(addr).await.unwrap();
            served.push(listener.accept().await.unwrap().0);
            let conn = Conn {
                stream,
                buf: BytesMut::new(),
                since: start,
            };
            pool.checkin(conn, start);
        }
        // The server closes its end of the first connection; the reactor
        // sees the end once this runtime polls it.
        drop(served.remove(0));
        // Until the reactor has seen the end (at once on an idle host).
        let patience = Instant::now() + Duration::from_secs(30);
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            pool.reap(start + Duration::from_secs(1));
            if pool.with_idle(|idle| idle.len()) == 2 {
                break;
            }
            assert!(Instant::now() < patience, "the closed one reaped");
        }
        pool.reap(start + MAX_IDLE - Duration::from_millis(1));
        assert_eq!(pool.with_idle(|idle| idle.len()), 2, "none expired yet");
        pool.reap(start + MAX_IDLE);
        assert_eq!(pool.with_idle(|idle| idle.len()), 0, "both expired");
        // Reaped connections are closed: the server reads their end.
        for mut s in served {
            let mut b = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
                .await
                .expect("the reaped connection was closed")
                .unwrap_or(0);
            assert_eq!(n, 0);
        }
    }
}
