//! rpcwire's own HTTP/1.1 connection loop for its own services
//! ([`HttpService`], and [`Combined`](super::combined::Combined) through
//! it).
//!
//! A JSON-RPC client over HTTP sends keep-alive `POST`s with a
//! `Content-Length` body, one after another or pipelined. This loop reads
//! such a request into the connection's buffer, parses its head with
//! httparse (hyper's parser), hands the body to the dispatcher as a slice
//! of that buffer, and writes the reply behind a head it composes in room
//! left in front of the reply, in one write. Anything else (HTTP/2's
//! preface, HTTP/1.0, another method, a WebSocket upgrade, a chunked body,
//! `Content-Type` that is not JSON, a body past the limit, no `Host` or
//! two (allowlist or not), a `Host` the service's allowlist refuses, a
//! head httparse refuses or one past the head limit) hands the
//! connection, with every byte read so far, to hyper's connection, which
//! answers as it always did (405, 415, 413, 403, 431, 400, the upgrade):
//! the two serve one connection in turn, never at once.
//!
//! Why: on the gateway's load test, hyper's server connection (its
//! dispatcher, body channel, header maps in and out, response encoding)
//! cost about a third of the gateway's user CPU per forwarded request. The
//! timers and signals are hyper's path's: the header timeout (from the
//! connection's start to its first request, and for each later head that
//! does not arrive whole; a hand-over keeps the deadline running), the
//! idle timeout (two quiet ticks of half of it; a reply the client does not
//! read counts as quiet, a request being read or answered does not), the
//! body timeout (`408`), graceful shutdown (a connection waiting for its
//! next request closes; one reading its first request's head, or
//! answering, finishes, says `connection: close`, and closes), and the
//! hard stop. `tests/http.rs` compares its answers with hyper's
//! path's, conversation by conversation.
//!
//! A client that leaves while its request is answered: the loop watches
//! the socket while it answers (reading what the client pipelines, up to
//! [`RETAINED`] bytes), and drops the calls (their futures, and what they
//! hold: a proxy's upstream connection) once it finds the client gone, as
//! hyper's path does; it once looked only at the dispatcher until the
//! reply was ready, so a call ran to its end (or its timeout) for nobody.
//! A reset is gone. An end of stream is a close or a half-close
//! (`shutdown(Write)` after the request, which HTTP allows: the client
//! still reads the reply), which look alike on the wire until data is
//! sent: the loop then sends an interim `100 Continue` (RFC 9110 §15.2:
//! clients parse 1xx responses they did not ask for), which a closed
//! socket answers with a reset. A half-closed client gets its reply after
//! that `100`. hyper's path watches its HTTP/1.1 clients with the same
//! [`gone`] (`serve_connection` in `http.rs`).

use std::any::Any;
use std::future::{Future, poll_fn};
use std::mem::MaybeUninit;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use futures_util::task::AtomicWaker;
use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWrite, Interest};
use tokio::net::TcpStream;
use tokio::time::{Instant, Interval, Sleep};

use super::hosts::{AllowedHosts, HostMemo};
use super::http::{
    AcceptEncoding, ConnConfig, ConnectionKit, GZIP_OFF_THREAD, H2_PREFACE, HttpService, Signal,
};
use super::{LimitKind, Shutdown, eq_ignore_case};
use crate::conn::{Connection, LazyExtension};

pub(super) mod plain_head;

/// The most headers a request head may have on this path (more: hyper's
/// path, which takes up to 100).
const MAX_HEADERS: usize = 32;
/// Room left in front of the reply for its head (status line,
/// `content-encoding`, `content-type`, `content-length`, `connection:
/// close`, `vary`, `date`: at most 201 bytes for a body of 5 MiB).
const HEAD_ROOM: usize = 224;
/// Reads ask for at least this much room.
const READ_CHUNK: usize = 8 * 1024;
/// A request larger than this does not leave its read buffer's room to the
/// connection, nor a reply buffer of more capacity.
const RETAINED: usize = 64 * 1024;

/// How a connection left this loop.
pub(super) enum Ended {
    /// Closed (or to be dropped): nothing more to do.
    Closed,
    /// For hyper: the socket, the bytes read from it not yet answered,
    /// the header deadline already running (for the first request, or for
    /// a head that did not arrive whole), which hyper's side keeps rather
    /// than starting a new one, and what the loop knew of the client's
    /// side (a half-close it saw and probed is not seen again as a close).
    HandOver(TcpStream, Bytes, Option<Instant>, Client),
}

/// Why a wait ended without its I/O.
#[derive(Debug)]
enum Stop {
    /// The hard stop: drop the connection at once.
    Hard,
    /// Graceful shutdown, while waiting for a request: close.
    Shutdown,
    /// The armed deadline (header or body) passed.
    Deadline,
    /// Two idle ticks without traffic.
    Idle,
    /// The client is gone (while its request was answered).
    Gone,
}

/// The interim response that finds out whether a client whose end of
/// stream was read closed its socket (which answers it with a reset) or
/// only half-closed (which reads it, and then the reply).
pub(super) const PROBE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// What the loop knows of the client's side.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Client {
    /// Its end of stream not read.
    Sending,
    /// Its end of stream read while a request was answered, and `sent`
    /// bytes of [`PROBE`] written since.
    Ended { sent: usize },
}

/// What a wait is for: it decides which signals end it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// For the next request; nothing of it read yet.
    Next,
    /// For the rest of the first request's head: graceful shutdown lets it
    /// come (under the header timer) and answers it, as hyper does.
    FirstHead,
    /// For the rest of a later request's head.
    Head,
    /// For the rest of a body.
    Body,
    /// For the dispatcher's reply.
    Answer,
    /// For the client to take the reply.
    Write,
}

/// A request head this loop answers.
struct Head {
    /// The head's length, up to and including its empty line.
    len: usize,
    content_length: usize,
    /// `Connection: close`: answer, then close.
    close: bool,
    /// `Expect: 100-continue`.
    expects_continue: bool,
    /// What `Accept-Encoding` says (read only when answers may be
    /// compressed: [`HttpService::gzip`]).
    accept_encoding: AcceptEncoding,
}

/// What the buffer's front holds.
enum Parsed {
    Complete(Head),
    Partial,
    /// Something for hyper.
    Other,
}

/// Serves `stream` with `http` while its requests are plain JSON-RPC
/// `POST`s; see the [module docs](self).
pub(super) async fn serve<S, K>(
    stream: TcpStream,
    http: &HttpService<S, K>,
    kit: &ConnectionKit,
) -> Ended
where
    S: Send + Sync + 'static,
    K: 'static,
{
    let mut conn = Own {
        stream,
        buf: BytesMut::new(),
        out: Vec::new(),
        watch: Watch::new(kit),
        served: false,
        client: Client::Sending,
        config: Arc::clone(&kit.config),
        host: HostMemo::default(),
    };
    // Per-request scratch, kept between requests; outside `Own` so that it
    // is lent to the dispatcher in place, not moved out and back.
    let mut scratch = None;
    let ended = conn.run(http, kit, &mut scratch).await;
    http.release(scratch);
    match ended {
        Ok(()) => Ended::Closed,
        Err(Leave::HandOver) => {
            let header_deadline = conn.watch.armed.then(|| conn.watch.deadline.deadline());
            Ended::HandOver(conn.stream, conn.buf.freeze(), header_deadline, conn.client)
        }
        Err(Leave::Close) => {
            super::http::close_lingering(conn.stream, &kit.hard_stop).await;
            Ended::Closed
        }
        Err(Leave::Drop) => Ended::Closed,
    }
}

/// How `run` leaves.
enum Leave {
    HandOver,
    /// Close the write side (a `FIN` after the last reply).
    Close,
    /// Drop the socket as it is.
    Drop,
}

struct Own {
    stream: TcpStream,
    /// Bytes read and not yet answered.
    buf: BytesMut,
    /// The reply, behind [`HEAD_ROOM`] bytes kept for its head.
    out: Vec<u8>,
    watch: Watch,
    /// Whether a request was answered (the header timer then runs only for
    /// heads that do not arrive whole).
    served: bool,
    client: Client,
    config: Arc<ConnConfig>,
    /// The host the allowlist last let through on this connection.
    host: HostMemo,
}

impl Own {
    async fn run<S, K>(
        &mut self,
        http: &HttpService<S, K>,
        kit: &ConnectionKit,
        scratch: &mut Option<Box<Connection>>,
    ) -> Result<(), Leave>
    where
        S: Send + Sync + 'static,
        K: 'static,
    {
        // The first request's head is due within the header timeout of the
        // connection's start.
        self.watch.arm(kit.config.header_timeout);
        loop {
            // A shutdown already triggered: nothing more is started on a
            // connection that was answered (pipelined bytes included).
            if self.served && (self.watch.stopping || kit.shutdown.is_triggered()) {
                return Err(Leave::Close);
            }
            let head = self
                .next_head(
                    http.max_body(),
                    http.cors_enabled(),
                    http.host_check(),
                    http.gzip_above().is_some(),
                    kit,
                )
                .await?;
            self.rest_of_body(&head, http).await?;
            if self.answer(&head, http, scratch, &kit.shutdown).await? {
                return Err(Leave::Close);
            }
            // Waiting for the next request: the scratch does not keep what
            // a large one needed (its arena, async reply buffers) while the
            // connection idles, thousands of connections over.
            if self.buf.is_empty()
                && let Some(scratch) = scratch.as_mut()
            {
                scratch.release_idle(RETAINED);
            }
        }
    }

    /// Reads until the buffer starts with a whole request head this loop
    /// answers (or hands over).
    async fn next_head(
        &mut self,
        max_body: usize,
        cors: bool,
        hosts: Option<&AllowedHosts>,
        gzip: bool,
        kit: &ConnectionKit,
    ) -> Result<Head, Leave> {
        loop {
            if self.served && self.buf.iter().all(|&b| b == b'\r' || b == b'\n') {
                // Empty lines before a request line are ignored (RFC 9112
                // 2.2; some clients end a body with a CRLF of their own):
                // no head has begun, so no header timer, as on hyper's
                // path.
                self.buf.clear();
            }
            if !self.buf.is_empty() {
                match parse_head(&self.buf, max_body, cors, hosts, &mut self.host, gzip) {
                    // A head past the limit that arrived whole (the buffer,
                    // grown for an earlier body, can take far more than the
                    // limit in one read): hyper decides, reading it in its
                    // own steps (431 unless it would have had it whole).
                    Parsed::Complete(head) if head.len > kit.max_header_bytes => {
                        return Err(Leave::HandOver);
                    }
                    Parsed::Complete(head) => {
                        self.watch.armed = false;
                        return Ok(head);
                    }
                    // HTTP/2's preface on a connection that answered
                    // HTTP/1.1: hyper's HTTP/1 connection closes without a
                    // word when it has the whole preface (a fresh one,
                    // which a hand-over makes, would switch to HTTP/2),
                    // and answers anything else that only starts like it
                    // 400, as hyper's path does after a hand-over.
                    Parsed::Other if self.served && self.buf.starts_with(H2_PREFACE) => {
                        return Err(Leave::Close);
                    }
                    // Part of the preface: the rest decides.
                    Parsed::Other if self.served && H2_PREFACE.starts_with(&self.buf) => {
                        if !self.watch.armed {
                            self.watch.arm(kit.config.header_timeout);
                        }
                    }
                    Parsed::Other => return Err(Leave::HandOver),
                    // hyper answers 431.
                    Parsed::Partial if self.buf.len() >= kit.max_header_bytes => {
                        return Err(Leave::HandOver);
                    }
                    Parsed::Partial => {
                        if self.served && !self.watch.armed {
                            self.watch.arm(kit.config.header_timeout);
                        }
                    }
                }
            }
            let phase = if self.buf.is_empty() {
                Phase::Next
            } else if self.served {
                Phase::Head
            } else {
                Phase::FirstHead
            };
            match self.fill(phase, 0).await {
                Ok(0) => return Err(Leave::Drop),
                Ok(_) => {}
                Err(stop) => return Err(self.leave(stop, phase)),
            }
        }
    }

    /// Reads until the buffer holds `head`'s body too; a body that takes
    /// longer than the body timeout is answered `408`.
    async fn rest_of_body<S, K>(
        &mut self,
        head: &Head,
        http: &HttpService<S, K>,
    ) -> Result<(), Leave>
    where
        S: Send + Sync + 'static,
        K: 'static,
    {
        let whole = head.len + head.content_length;
        if self.buf.len() >= whole {
            return Ok(());
        }
        if head.expects_continue {
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        self.watch.arm(http.body_timeout());
        while self.buf.len() < whole {
            match self.fill(Phase::Body, whole).await {
                Ok(0) => {
                    // The client stopped sending (a half-close) before the
                    // body was whole: hyper's path answers 400.
                    let mut out = std::mem::take(&mut self.out);
                    out.clear();
                    out.resize(HEAD_ROOM, 0);
                    out.extend_from_slice(super::http::UNREADABLE_BODY);
                    // No `connection: close` (hyper's path does not say
                    // it either); the connection closes all the same.
                    let extras = HeadExtras {
                        vary_origin: http.cors_varies(),
                        ..HeadExtras::default()
                    };
                    let start = put_head(&mut out, "400 Bad Request", extras);
                    self.write(&out[start..]).await?;
                    return Err(Leave::Close);
                }
                Ok(_) => {}
                Err(Stop::Deadline) => {
                    let mut out = std::mem::take(&mut self.out);
                    out.clear();
                    out.resize(HEAD_ROOM, 0);
                    out.extend_from_slice(&http.slow_body_reply());
                    let extras = HeadExtras {
                        close: true,
                        vary_origin: http.cors_varies(),
                        ..HeadExtras::default()
                    };
                    let start = put_head(&mut out, "408 Request Timeout", extras);
                    self.write(&out[start..]).await?;
                    return Err(Leave::Close);
                }
                Err(stop) => return Err(self.leave(stop, Phase::Body)),
            }
        }
        self.watch.armed = false;
        Ok(())
    }

    /// Dispatches the request at the front of the buffer and writes its
    /// reply; returns whether the connection closes after it.
    async fn answer<S, K>(
        &mut self,
        head: &Head,
        http: &HttpService<S, K>,
        scratch: &mut Option<Box<Connection>>,
        shutdown: &super::Shutdown,
    ) -> Result<bool, Leave>
    where
        S: Send + Sync + 'static,
        K: 'static,
    {
        let headers = LazyHeaders {
            head: self.buf.split_to(head.len).freeze(),
            map: OnceLock::new(),
        };
        let body = self.buf.split_to(head.content_length).freeze();
        // A request far larger than usual leaves the buffer it needed with
        // it (freed once answered): what follows it is copied out, so that
        // a connection does not keep up to `max_message_len` of room for
        // as long as it lives.
        if head.len + head.content_length > RETAINED {
            self.buf = BytesMut::from(&self.buf[..]);
        }
        self.served = true;
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        out.resize(HEAD_ROOM, 0);
        let answered = {
            let answer = pin!(http.answer(scratch, headers, body, &mut out));
            self.answering(answer).await
        };
        if answered.is_err() {
            // The hard stop, or the client gone: the calls still running
            // are dropped with the scratch.
            *scratch = None;
            return Err(Leave::Drop);
        }
        let status = if out.len() == HEAD_ROOM {
            "204 No Content"
        } else {
            "200 OK"
        };
        let body_len = out.len() - HEAD_ROOM;
        let compressible = http
            .gzip_above()
            .is_some_and(|min_len| body_len > 0 && body_len >= min_len);
        let gzip = compressible && head.accept_encoding.gzip();
        let mut packed = None;
        if gzip && body_len >= GZIP_OFF_THREAD {
            // On tokio's blocking pool (see `GZIP_OFF_THREAD`), watching
            // the client and the hard stop meanwhile as while dispatching:
            // a client gone drops the connection, and the compression's
            // result with it. The reply's buffer goes with the job: at
            // this size it would not be kept for the next reply anyway.
            let body = Bytes::from(std::mem::take(&mut out)).slice(HEAD_ROOM..);
            let packing = pin!(async {
                packed = Some(super::http::gzip_packed(body, HEAD_ROOM).await);
            });
            if self.answering(packing).await.is_err() {
                return Err(Leave::Drop);
            }
        }
        if let Client::Ended { sent } = self.client
            && sent > 0
            && sent < PROBE.len()
        {
            // A probe cut short goes out whole before the reply.
            self.write(&PROBE[sent..]).await?;
            self.client = Client::Ended { sent: PROBE.len() };
        }
        let close = head.close || self.watch.stopping || shutdown.is_triggered();
        let extras = HeadExtras {
            close,
            vary_origin: http.cors_varies(),
            vary_encoding: compressible,
            gzip,
        };
        let written = if extras.gzip {
            let mut packed = packed.unwrap_or_else(|| {
                let mut packed = Vec::with_capacity(HEAD_ROOM + body_len / 4);
                packed.resize(HEAD_ROOM, 0);
                super::http::gzip_into(&out[HEAD_ROOM..], &mut packed);
                packed
            });
            let start = put_head(&mut packed, status, extras);
            self.write(&packed[start..]).await
        } else {
            let start = put_head(&mut out, status, extras);
            self.write(&out[start..]).await
        };
        // A reply far larger than usual is not kept for the next: a
        // client asking for large replies on many connections it then
        // leaves open would make each hold that much.
        if out.capacity() <= RETAINED {
            self.out = out;
        }
        written.map(|()| close)
    }

    /// Polls `answer` to its end, or until the hard stop, or until the
    /// client is found gone ([`Stop::Gone`]): see the [module docs](self).
    async fn answering(
        &mut self,
        mut answer: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), Stop> {
        let Own {
            stream,
            buf,
            watch,
            client,
            ..
        } = self;
        let stream: &TcpStream = stream;
        // Polled only once a probe is out (an error is what a reset raises).
        let mut reset = pin!(stream.ready(Interest::ERROR));
        poll_fn(|cx| {
            if answer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            if gone(
                stream,
                buf,
                client,
                &mut watch.touched,
                true,
                reset.as_mut(),
                cx,
            ) {
                return Poll::Ready(Err(Stop::Gone));
            }
            watch.poll(cx, Phase::Answer).map(Err)
        })
        .await
    }

    /// What a signal that ended a wait in `phase` means for the connection
    /// (counted as a limit hit where it is one).
    fn leave(&self, stop: Stop, phase: Phase) -> Leave {
        let waiting = matches!(phase, Phase::Next | Phase::FirstHead | Phase::Head);
        match stop {
            Stop::Hard => Leave::Drop,
            // Between requests: close; a request under way is finished.
            Stop::Shutdown if waiting => Leave::Close,
            Stop::Shutdown => Leave::Drop,
            Stop::Deadline => {
                self.config.hit(LimitKind::Header);
                Leave::Drop
            }
            Stop::Idle => {
                self.config.hit(LimitKind::Idle);
                if waiting { Leave::Close } else { Leave::Drop }
            }
            Stop::Gone => Leave::Drop,
        }
    }

    /// Reads what the socket has (at least 1 byte, or 0 at its end), with
    /// room for up to `want` bytes in all: growing with what arrived (at
    /// most doubling what the buffer holds), never by the whole of what a
    /// `Content-Length` announces, so that a client announcing the limit
    /// and sending a few bytes holds a read's worth of heap, not the
    /// limit's (the doubling keeps a large body's copies linear).
    async fn fill(&mut self, phase: Phase, want: usize) -> Result<usize, Stop> {
        let room = want
            .saturating_sub(self.buf.len())
            .min(self.buf.len())
            .max(READ_CHUNK);
        if self.buf.capacity() - self.buf.len() < room / 2 {
            self.buf.reserve(room);
        }
        let n = self
            .wait(phase, |own, cx| {
                // Through `AsyncRead` rather than `try_read_buf`: a short
                // read tells tokio the socket is drained, so the next read
                // (for the next request, which comes after this reply) waits
                // instead of first failing with `EAGAIN` (measured: 0.42
                // such syscalls per forwarded request on the gateway).
                pin!(own.stream.read_buf(&mut own.buf)).poll(cx)
            })
            .await?;
        // A read error ends the connection as its end does.
        let n = n.unwrap_or(0);
        if n > 0 {
            self.watch.touched = true;
        }
        Ok(n)
    }

    /// Writes all of `bytes`; a hard stop drops the connection, and so does
    /// a client that takes nothing for two idle periods (after the first,
    /// nothing more is started: as hyper's path shuts down gracefully
    /// then, and drops the connection after another).
    async fn write(&mut self, bytes: &[u8]) -> Result<(), Leave> {
        let mut at = 0;
        let mut idle_once = false;
        while at < bytes.len() {
            let written = self
                .wait(Phase::Write, |own, cx| {
                    Pin::new(&mut own.stream).poll_write(cx, &bytes[at..])
                })
                .await;
            match written {
                Ok(Ok(n)) if n > 0 => {
                    at += n;
                    self.watch.touched = true;
                }
                // Closed, failed, or a signal: nothing more can be sent.
                Ok(_) => return Err(Leave::Drop),
                Err(Stop::Idle) if !idle_once => {
                    idle_once = true;
                    self.watch.stopping = true;
                    self.watch.quiet = 0;
                    // Its timers polled again at the next wait, so that
                    // the next tick wakes it.
                    self.watch.signal.fired.store(true, Ordering::Relaxed);
                }
                Err(stop) => return Err(self.leave(stop, Phase::Write)),
            }
        }
        Ok(())
    }

    /// Polls `io` until it is ready, or a signal that ends `phase` comes.
    async fn wait<T>(
        &mut self,
        phase: Phase,
        mut io: impl FnMut(&mut Own, &mut TaskContext<'_>) -> Poll<T>,
    ) -> Result<T, Stop> {
        poll_fn(|cx| {
            if let Poll::Ready(t) = io(self, cx) {
                return Poll::Ready(Ok(t));
            }
            self.watch.poll(cx, phase).map(Err)
        })
        .await
    }
}

/// Whether the client of a request being answered is gone, as far as the
/// socket tells now (registering for what would tell more): a reset, or an
/// end of stream and then a reset of the [`PROBE`] written after it. Bytes
/// it sends meanwhile (pipelined requests) are read into `buf`, up to
/// [`RETAINED`] bytes; past that it is not read (nor watched) until the
/// reply is out. Without `probe` (an HTTP/1.0 request, to which no 1xx may
/// be sent) an end of stream is taken for a close.
pub(super) fn gone(
    stream: &TcpStream,
    buf: &mut BytesMut,
    client: &mut Client,
    touched: &mut bool,
    probe: bool,
    reset: Pin<&mut impl Future>,
    cx: &mut TaskContext<'_>,
) -> bool {
    loop {
        match *client {
            Client::Sending => {
                if buf.len() >= RETAINED {
                    return false;
                }
                match stream.poll_read_ready(cx) {
                    Poll::Pending => return false,
                    Poll::Ready(Err(_)) => return true,
                    Poll::Ready(Ok(())) => {}
                }
                // Room, so that a read of 0 bytes is the end of stream.
                if buf.capacity() - buf.len() < READ_CHUNK / 2 {
                    buf.reserve(READ_CHUNK);
                }
                match stream.try_read_buf(buf) {
                    Ok(0) if !probe => return true,
                    Ok(0) => *client = Client::Ended { sent: 0 },
                    Ok(_) => *touched = true,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return true,
                }
            }
            Client::Ended { sent } if sent < PROBE.len() => {
                match stream.poll_write_ready(cx) {
                    Poll::Pending => return false,
                    Poll::Ready(Err(_)) => return true,
                    Poll::Ready(Ok(())) => {}
                }
                match stream.try_write(&PROBE[sent..]) {
                    Ok(0) => return true,
                    Ok(n) => *client = Client::Ended { sent: sent + n },
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return true,
                }
            }
            Client::Ended { .. } => return reset.poll(cx).is_ready(),
        }
    }
}

/// A connection's timers and shutdown signals, polled with a waker of
/// their own only when one of them fired (as on hyper's path): a wake-up
/// for I/O costs no look at them.
struct Watch {
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    hard: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// The header or body deadline, when `armed`.
    deadline: Pin<Box<Sleep>>,
    armed: bool,
    ticks: Interval,
    /// Ticks in a row without traffic.
    quiet: u32,
    /// Traffic since the last tick.
    touched: bool,
    /// Graceful shutdown was seen.
    stopping: bool,
    signal: Arc<Signal>,
    signal_waker: Waker,
}

impl Watch {
    fn new(kit: &ConnectionKit) -> Watch {
        Watch::watching(&kit.shutdown, &kit.hard_stop, kit.config.idle)
    }

    fn watching(shutdown: &Shutdown, hard_stop: &Shutdown, idle: Duration) -> Watch {
        let (stop, hard) = (shutdown.clone(), hard_stop.clone());
        let period = idle / 2;
        let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let signal = Arc::new(Signal {
            fired: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Watch {
            stop: Box::pin(async move { stop.triggered().await }),
            hard: Box::pin(async move { hard.triggered().await }),
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: false,
            ticks,
            quiet: 0,
            touched: false,
            stopping: false,
            signal_waker: Waker::from(Arc::clone(&signal)),
            signal,
        }
    }

    /// Starts the deadline: `after` from now.
    fn arm(&mut self, after: Duration) {
        self.deadline.as_mut().reset(Instant::now() + after);
        self.armed = true;
        // Polled at the next wait, so that it registers.
        self.signal.fired.store(true, Ordering::Relaxed);
    }

    fn poll(&mut self, cx: &mut TaskContext<'_>, phase: Phase) -> Poll<Stop> {
        let closes_on_shutdown = matches!(phase, Phase::Next | Phase::Head);
        if self.stopping && closes_on_shutdown {
            return Poll::Ready(Stop::Shutdown);
        }
        self.signal.task.register(cx.waker());
        if !self.signal.fired.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let mut scx = TaskContext::from_waker(&self.signal_waker);
        if self.hard.as_mut().poll(&mut scx).is_ready() {
            return Poll::Ready(Stop::Hard);
        }
        if !self.stopping && self.stop.as_mut().poll(&mut scx).is_ready() {
            self.stopping = true;
            if closes_on_shutdown {
                return Poll::Ready(Stop::Shutdown);
            }
        }
        if self.armed
            && matches!(
                phase,
                Phase::Next | Phase::FirstHead | Phase::Head | Phase::Body
            )
            && self.deadline.as_mut().poll(&mut scx).is_ready()
        {
            // The ticks are not polled this time, and one may have fired
            // with the deadline (its wake spent): the next wait looks at
            // them, or the idle limit of the 408's write would never come.
            self.signal.fired.store(true, Ordering::Relaxed);
            return Poll::Ready(Stop::Deadline);
        }
        while self.ticks.poll_tick(&mut scx).is_ready() {
            // A request being read or answered is not idle (its own
            // timers bound it), as on hyper's path.
            let busy =
                std::mem::take(&mut self.touched) || matches!(phase, Phase::Body | Phase::Answer);
            self.quiet = if busy { 0 } else { self.quiet + 1 };
            if self.quiet >= 2 {
                return Poll::Ready(Stop::Idle);
            }
        }
        Poll::Pending
    }
}

/// Reads the request head at the front of `buf`: complete and answerable
/// here, partial, or for hyper.
fn parse_head(
    buf: &[u8],
    max_body: usize,
    cors: bool,
    hosts: Option<&AllowedHosts>,
    host_memo: &mut HostMemo,
    gzip: bool,
) -> Parsed {
    // The shape clients write, read in one pass; httparse for any other.
    let mut fields = HeadFields::new(cors, hosts, host_memo, gzip);
    if let Some(len) = plain_head::read_plain_head(buf, |name, value| fields.take(name, value)) {
        return fields.finish(len, max_body);
    }
    parse_head_httparse(buf, max_body, fields.fresh())
}

/// [`parse_head`] by httparse alone, the fields read into `head` (fresh).
fn parse_head_httparse(buf: &[u8], max_body: usize, mut head: HeadFields<'_>) -> Parsed {
    // Left uninitialized: httparse writes the ones it returns (an
    // initialized array would be 1 KiB written per request).
    let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if req.method != Some("POST") || req.version != Some(1) || !plain_target(req.path) {
        return Parsed::Other;
    }
    for field in req.headers.iter() {
        head.take(field.name.as_bytes(), field.value);
        if head.other {
            return Parsed::Other;
        }
    }
    head.finish(len, max_body)
}

/// What a request head's fields say, read one field at a time.
struct HeadFields<'h> {
    cors: bool,
    hosts: Option<&'h AllowedHosts>,
    host_memo: &'h mut HostMemo,
    gzip: bool,
    /// A field that only hyper's path answers: the rest are not read.
    other: bool,
    length: Option<usize>,
    /// The first `Content-Type` is the one that counts, as `HeaderMap::get`
    /// reads it on hyper's path.
    json: Option<bool>,
    host_seen: bool,
    close: bool,
    expects_continue: bool,
    accept_encoding: AcceptEncoding,
}

impl<'h> HeadFields<'h> {
    fn new(
        cors: bool,
        hosts: Option<&'h AllowedHosts>,
        host_memo: &'h mut HostMemo,
        gzip: bool,
    ) -> Self {
        HeadFields {
            cors,
            hosts,
            host_memo,
            gzip,
            other: false,
            length: None,
            json: None,
            host_seen: false,
            close: false,
            expects_continue: false,
            accept_encoding: AcceptEncoding::default(),
        }
    }

    /// The same settings, nothing read yet.
    fn fresh(self) -> Self {
        HeadFields::new(self.cors, self.hosts, self.host_memo, self.gzip)
    }

    #[inline]
    fn take(&mut self, name: &[u8], value: &[u8]) {
        if self.other {
            return;
        }
        if eq_ignore_case(name, b"content-length") {
            match parse_length(value) {
                Some(n) if self.length.is_none_or(|l| l == n) => self.length = Some(n),
                _ => self.other = true,
            }
        } else if eq_ignore_case(name, b"content-type") {
            self.json = self.json.or(Some(super::http::is_json_content_type(value)));
        } else if eq_ignore_case(name, b"connection") {
            // hyper reads the tokens of a value that is a `str` (visible
            // ASCII: httparse let no other control byte but tab through),
            // and none of another.
            let readable = value.is_ascii();
            for token in value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if readable && eq_ignore_case(token, b"close") {
                    self.close = true;
                } else if eq_ignore_case(token, b"upgrade") {
                    self.other = true;
                }
            }
        } else if eq_ignore_case(name, b"expect") {
            if !eq_ignore_case(value.trim_ascii(), b"100-continue") {
                self.other = true;
            }
            self.expects_continue = true;
        } else if self.gzip && eq_ignore_case(name, b"accept-encoding") {
            self.accept_encoding.read(value);
        } else if eq_ignore_case(name, b"host") {
            // A second `Host` (allowlist or not), one whose value is not a
            // host, or a host not listed: hyper's path refuses the request.
            if self.host_seen
                || match self.hosts {
                    Some(hosts) => !self.host_memo.allows(hosts, value),
                    None => !super::hosts::is_host_value(value),
                }
            {
                self.other = true;
            }
            self.host_seen = true;
        } else if self.cors && eq_ignore_case(name, b"origin") {
            // A browser's call: hyper's path applies the CORS policy.
            self.other = true;
        } else if eq_ignore_case(name, b"transfer-encoding") || eq_ignore_case(name, b"upgrade") {
            self.other = true;
        } else if eq_ignore_case(name, b"content-encoding") && !super::is_identity(value) {
            // A coded body: hyper's path refuses it (415).
            self.other = true;
        }
    }

    /// The head of `len` bytes these fields make.
    fn finish(self, len: usize, max_body: usize) -> Parsed {
        // No `Host` (HTTP/1.1, the only version answered here), allowlist
        // or not: hyper's path answers 400 (`hosts::lacks_one_host`).
        if self.other || !self.host_seen {
            return Parsed::Other;
        }
        // The head and body's whole length must fit a `usize` too: on a
        // 32-bit target, under a limit near `usize::MAX`, it could wrap and
        // frame the body shorter than its `Content-Length`.
        match self.length {
            Some(n) if self.json == Some(true) && n <= max_body && len.checked_add(n).is_some() => {
                Parsed::Complete(Head {
                    len,
                    content_length: n,
                    close: self.close,
                    expects_continue: self.expects_continue,
                    accept_encoding: self.accept_encoding,
                })
            }
            _ => Parsed::Other,
        }
    }
}

/// Whether the request target is an origin-form path (and query) of bytes
/// that `http::Uri` takes as they are, within its length limit: anything
/// else goes to hyper, which answers as it does (400, 414) or takes it.
fn plain_target(target: Option<&str>) -> bool {
    let Some(target) = target else { return false };
    target.starts_with('/')
        && target.len() < usize::from(u16::MAX)
        && target
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b))
}

/// A `Content-Length` value: decimal digits, no sign, no overflow (checked:
/// 19 digits fit a 64-bit `usize`, not a 32-bit one, where a wrapped value
/// would frame the body shorter than the client meant).
fn parse_length(value: &[u8]) -> Option<usize> {
    let value = value.trim_ascii();
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0usize, |n, &b| {
        let digit = b.is_ascii_digit().then(|| usize::from(b - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

/// The request's header map as handlers see it
/// (`ctx.extension::<HeaderMap>()`), built from the head at its first
/// access: most handlers never look, and building it for every request was
/// about 7% of the gateway's user CPU per forwarded request (callgrind).
pub(crate) struct LazyHeaders {
    /// The request head, as this loop answered it.
    head: Bytes,
    map: OnceLock<Box<HeaderMap>>,
}

impl LazyHeaders {
    /// Lets go of the request's head (and of its map).
    pub(super) fn clear(&mut self) {
        self.head = Bytes::new();
        self.map.take();
    }

    /// The head parsed again (it parsed before): values are slices of its
    /// bytes, names are hyper's.
    fn build(&self) -> HeaderMap {
        let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        if req
            .parse_with_uninit_headers(&self.head, &mut fields)
            .is_err()
        {
            return HeaderMap::new();
        }
        let mut map = HeaderMap::with_capacity(req.headers.len());
        for field in req.headers.iter() {
            // httparse checked both: a name is a token, a value has no
            // control bytes but tab.
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(field.name.as_bytes()),
                HeaderValue::from_maybe_shared(self.head.slice_ref(field.value)),
            ) {
                // More `Content-Length`s (equal ones: the loop answers no
                // others) are left out, as hyper leaves them out.
                if name == http::header::CONTENT_LENGTH && map.contains_key(&name) {
                    continue;
                }
                map.append(name, value);
            }
        }
        map
    }
}

impl LazyExtension for LazyHeaders {
    fn value(&self) -> &(dyn Any + Send + Sync) {
        &**self.map.get_or_init(|| Box::new(self.build()))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// What a response head says besides its status and body length.
#[derive(Clone, Copy, Default)]
struct HeadExtras {
    /// `Connection: close`.
    close: bool,
    /// `Vary: Origin`: a CORS policy lists origins, so answers to requests
    /// with `Origin` (hyper's path) differ from these, and caches must know.
    vary_origin: bool,
    /// `Vary: Accept-Encoding`: the answer is long enough to be compressed
    /// for clients that accept it.
    vary_encoding: bool,
    /// `Content-Encoding: gzip`.
    gzip: bool,
}

/// Writes the response head for `status` right before the body that
/// follows [`HEAD_ROOM`] in `out`; returns where it starts.
fn put_head(out: &mut [u8], status: &str, extras: HeadExtras) -> usize {
    let body_len = out.len() - HEAD_ROOM;
    let mut head = [0u8; HEAD_ROOM];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        head[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(b"HTTP/1.1 ");
    put(status.as_bytes());
    put(b"\r\n");
    if extras.gzip {
        put(b"content-encoding: gzip\r\n");
    }
    if body_len > 0 {
        put(b"content-type: application/json\r\ncontent-length: ");
        let mut digits = itoa_buf(body_len);
        put(digits.as_slice());
        digits.clear();
        put(b"\r\n");
    }
    if extras.close {
        put(b"connection: close\r\n");
    }
    match (extras.vary_origin, extras.vary_encoding) {
        (true, true) => put(b"vary: origin, accept-encoding\r\n"),
        (true, false) => put(b"vary: origin\r\n"),
        (false, true) => put(b"vary: accept-encoding\r\n"),
        (false, false) => {}
    }
    put(b"date: ");
    put(&http_date());
    put(b"\r\n\r\n");
    let start = HEAD_ROOM - at;
    out[start..HEAD_ROOM].copy_from_slice(&head[..at]);
    start
}

fn itoa_buf(mut n: usize) -> smallvec::SmallVec<[u8; 20]> {
    let mut digits = smallvec::SmallVec::<[u8; 20]>::new();
    loop {
        digits.push(b'0' + (n % 10) as u8);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    digits
}

/// The `date` header's value for now (RFC 9110's IMF-fixdate), formatted
/// once a second per thread.
fn http_date() -> [u8; 29] {
    use std::cell::Cell;
    thread_local! {
        static CACHED: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [0; 29])) };
    }
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    CACHED.with(|cached| {
        let (at, text) = cached.get();
        if at == secs {
            return text;
        }
        let mut text = [0u8; 29];
        let formatted = httpdate::fmt_http_date(now);
        if formatted.len() == 29 {
            text.copy_from_slice(formatted.as_bytes());
        }
        cached.set((secs, text));
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deadline and an idle tick that fire in one turn: the deadline is
    /// told (the body's 408 is written next) and the tick still counts,
    /// so a client that never reads that 408 is dropped as idle. Its wake
    /// was spent with the deadline's and the ticks were never polled
    /// again: the write waited for good (found by a review).
    #[tokio::test(start_paused = true)]
    async fn idle_ticks_go_on_after_a_deadline_that_fired_with_one() {
        let (stop, hard) = (Shutdown::new(), Shutdown::new());
        // Ticks every second, the first one second from now.
        let mut watch = Watch::watching(&stop, &hard, Duration::from_secs(2));
        watch.arm(Duration::from_secs(1));
        let mut cx = TaskContext::from_waker(Waker::noop());
        assert!(watch.poll(&mut cx, Phase::Body).is_pending());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(matches!(
            watch.poll(&mut cx, Phase::Body),
            Poll::Ready(Stop::Deadline)
        ));
        let mut stopped = None;
        for _ in 0..4 {
            if let Poll::Ready(why) = watch.poll(&mut cx, Phase::Write) {
                stopped = Some(why);
                break;
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        assert!(matches!(stopped, Some(Stop::Idle)), "{stopped:?}");
    }

    #[test]
    fn heads_this_loop_answers_and_those_it_hands_over() {
        let post = |extra: &str| {
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}\r\n{{}}"
            )
        };
        let complete = |text: &str| match parse_head(
            text.as_bytes(),
            100,
            false,
            None,
            &mut HostMemo::default(),
            false,
        ) {
            Parsed::Complete(h) => Some((h.len, h.content_length, h.close, h.expects_continue)),
            _ => None,
        };
        let plain = post("Content-Length: 2\r\n");
        assert_eq!(complete(&plain), Some((plain.len() - 2, 2, false, false)));
        assert!(
            complete(&post(
                "Content-Length: 2\r\nConnection: keep-alive, close\r\n"
            ))
            .unwrap()
            .2
        );
        assert!(
            complete(&post("Content-Length: 2\r\nExpect: 100-continue\r\n"))
                .unwrap()
                .3
        );
        assert!(complete(&post("Content-Length: 2\r\nContent-Length: 2\r\n")).is_some());
        assert_eq!(parse_length(b"0000000000000000002"), Some(2));
        assert_eq!(
            parse_length(usize::MAX.to_string().as_bytes()),
            (usize::MAX.to_string().len() <= 19).then_some(usize::MAX)
        );
        let past = (u128::try_from(usize::MAX).unwrap() + 3).to_string();
        assert_eq!(parse_length(past.as_bytes()), None);
        // A head and body whose lengths add past `usize::MAX` (a 32-bit
        // target under a limit near it) go to hyper, which refuses them,
        // rather than wrapping into a short body.
        fn fields(memo: &mut HostMemo) -> HeadFields<'_> {
            let mut f = HeadFields::new(false, None, memo, false);
            f.take(b"host", b"x");
            f.take(b"content-type", b"application/json");
            f.take(b"content-length", b"2");
            f
        }
        let mut memo = HostMemo::default();
        let near = fields(&mut memo).finish(usize::MAX - 2, usize::MAX);
        assert!(matches!(near, Parsed::Complete(_)));
        let past = fields(&mut memo).finish(usize::MAX - 1, usize::MAX);
        assert!(matches!(past, Parsed::Other));
        for other in [
            post(""),
            post("Content-Length: 2\r\nContent-Length: 3\r\n"),
            post("Content-Length: +2\r\n"),
            post("Content-Length: 101\r\n"),
            post("Content-Length: 99999999999999999999999\r\n"),
            post("Transfer-Encoding: chunked\r\n"),
            post("Content-Length: 2\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"),
            post("Content-Length: 2\r\nExpect: something\r\n"),
            "POST / HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}".into(),
            "POST / HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
                .into(),
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n".into(),
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".into(),
            "\x16\x03\x01".into(),
        ] {
            assert!(
                matches!(
                    parse_head(
                        other.as_bytes(),
                        100,
                        false,
                        None,
                        &mut HostMemo::default(),
                        false
                    ),
                    Parsed::Other
                ),
                "{other:?}"
            );
        }
        for cut in 0..plain.len() - 2 {
            assert!(
                matches!(
                    parse_head(
                        &plain.as_bytes()[..cut],
                        100,
                        false,
                        None,
                        &mut HostMemo::default(),
                        false,
                    ),
                    Parsed::Partial
                ),
                "{cut}"
            );
        }
    }

    #[test]
    fn plain_heads_are_answered_as_httparse_reads_them() {
        // Every byte at every position of real clients' heads (with a
        // `Connection: Upgrade`, a second `Host` and an `Origin` among
        // them), under each setting that changes how fields are read: the
        // plain reader and httparse's path decide alike.
        let outcome = |parsed: Parsed| match parsed {
            Parsed::Complete(h) => format!(
                "complete {} {} {} {} {:?}",
                h.len, h.content_length, h.close, h.expects_continue, h.accept_encoding
            ),
            Parsed::Partial => "partial".into(),
            Parsed::Other => "other".into(),
        };
        let listed = AllowedHosts::list(["127.0.0.1", "localhost"]).unwrap();
        let mut heads: Vec<String> = plain_head::tests::HEADS
            .iter()
            .map(|h| h.to_string())
            .collect();
        for extra in [
            "Connection: Upgrade\r\n",
            "Host: y\r\n",
            "Origin: http://x\r\n",
            "Expect: 100-continue\r\n",
            "Connection: close\r\n",
        ] {
            heads.push(heads[0].replacen("\r\n", &format!("\r\n{extra}"), 1));
        }
        let mut complete = 0;
        for head in &heads {
            for at in 0..head.len() {
                for b in 0..=255u8 {
                    let mut changed = head.as_bytes().to_vec();
                    changed[at] = b;
                    for (cors, hosts, gzip) in [(false, None, false), (true, Some(&listed), true)] {
                        let mut memo = HostMemo::default();
                        let ours = outcome(parse_head(&changed, 100, cors, hosts, &mut memo, gzip));
                        let mut memo = HostMemo::default();
                        let fields = HeadFields::new(cors, hosts, &mut memo, gzip);
                        let theirs = outcome(parse_head_httparse(&changed, 100, fields));
                        assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(&changed));
                        complete += usize::from(ours.starts_with("complete"));
                    }
                }
            }
        }
        assert!(complete > 10_000, "{complete}");
    }

    #[test]
    fn response_heads_sit_right_before_their_body() {
        let mut out = vec![0; HEAD_ROOM];
        out.extend_from_slice(b"{\"x\":1}");
        let start = put_head(
            &mut out,
            "200 OK",
            HeadExtras {
                close: true,
                ..HeadExtras::default()
            },
        );
        let text = std::str::from_utf8(&out[start..]).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\nconnection: close\r\ndate: "), "{text}");
        assert!(text.ends_with(" GMT\r\n\r\n{\"x\":1}"), "{text}");
        let mut empty = vec![0; HEAD_ROOM];
        let start = put_head(&mut empty, "204 No Content", HeadExtras::default());
        let text = std::str::from_utf8(&empty[start..]).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 204 No Content\r\ndate: "),
            "{text}"
        );
        assert_eq!(itoa_buf(0).as_slice(), b"0");
        assert_eq!(itoa_buf(1234567).as_slice(), b"1234567");
    }

    #[test]
    fn the_longest_head_fits_its_room() {
        // Every header at once, the longest status this loop writes, a
        // body of 5 MiB (seven digits of length).
        let mut out = vec![0; HEAD_ROOM + (5 << 20)];
        let start = put_head(
            &mut out,
            "408 Request Timeout",
            HeadExtras {
                close: true,
                vary_origin: true,
                vary_encoding: true,
                gzip: true,
            },
        );
        let text = std::str::from_utf8(&out[start..HEAD_ROOM]).unwrap();
        assert!(
            text.starts_with(
                "HTTP/1.1 408 Request Timeout\r\ncontent-encoding: gzip\r\ncontent-type: application/json\r\ncontent-length: 5242880\r\nconnection: close\r\nvary: origin, accept-encoding\r\ndate: "
            ),
            "{text}"
        );
    }
}
