//! Runs one input through the stream transports' `Driver` twice and checks
//! that both runs answer alike: the one-pass path for concatenated JSON
//! (`Framer::parser_frames`) against the framer-first path, and for the
//! other framers one read-size sequence against another (replies must not
//! depend on how reads cut the stream). Used by the `stream` fuzz target
//! and the corpus replay.
//!
//! The input is decoded as:
//!
//! * byte 0, flags: bits 0-1 the framer (0 `Lines`, 1 `Lsp`, else
//!   `Concatenated`); bit 2 small limits (five bytes follow); bit 3 the
//!   dispatcher with an async method; bit 4 the dispatcher with a batch
//!   limit of 2 and a reply limit of 256 bytes; bit 5 a writer taking a
//!   few bytes per write (one byte follows); bit 6 large messages (each
//!   byte 0x01 of the stream stands for 8 KiB of spaces, so that a message
//!   can pass the driver's 64 KiB thresholds); bit 7 a writer that is not
//!   ready every other call;
//! * with small limits: `Limits::max_message_len` (8 + 8 b), the framer's
//!   frame limit (8 + 8 b), `max_in_flight` (1 + low 3 bits) and
//!   `max_queued` (1 + next 3 bits), `Driver::max_pending_output`
//!   (1 + 16 b), LSP's header limit (16 + 4 b);
//! * with a chunked writer: bytes per write (1 + 4 b);
//! * the read sizes, cycled: a count (1 + b % 8), then each size: 0 the
//!   reader is not ready once (`Pending`), up to 0xEF that many bytes,
//!   else two more bytes: 1 + that u16 (up to 64 KiB);
//! * the rest: the bytes of the stream.
//!
//! Handlers are deterministic and synchronous (the async dispatcher's
//! `later` is ready when first polled), so with the sync dispatcher both
//! runs must write the same bytes; with the async one, the same replies in
//! any order (they are written as they complete).
//!
//! Two handlers reach the driver's two-way and shutdown paths. `stop`
//! (every dispatcher) triggers the run's shutdown: the driver starts
//! nothing after it and ends once what runs is answered. `ask` (the async
//! dispatchers) asks the client `client/ping` with its params (ids count
//! from 1 per connection, so an input can carry the answer) and replies
//! with the answer's result. Whether an answer arrives before or after the
//! question depends on how the reads cut the stream, so a stream that
//! names `ask` is checked for valid, framed output, bounded buffers and a
//! driver that returns, not for the same replies in both runs.
#![allow(dead_code)]

// The includer declares `fuzz_rpc` (`support/fuzz_rpc.rs`) at its root.
pub use crate::fuzz_rpc::{Dispatchers, dispatchers};
use crate::fuzz_rpc::{Outgoing, check_outgoing};

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use rpcwire::Dispatcher;
use rpcwire::frame::{Concatenated, Framer, Lines, Lsp, Step};
use rpcwire::server::stream::{CloseReason, Driver};
use rpcwire::server::{Limits, Shutdown};
use serde_json::value::RawValue;

thread_local! {
    /// One runtime per thread, its clock paused: nothing here sleeps, so
    /// the clock moves only when every task waits, which is how a driver
    /// that hangs shows (its idle timeout fires).
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Lines,
    Lsp,
    Concatenated,
}

#[derive(Clone, Copy, Debug)]
enum ReadSize {
    Bytes(usize),
    Pending,
}

#[derive(Clone, Debug)]
struct Config {
    framer: Choice,
    limits: Limits,
    max_frame: usize,
    max_header: usize,
    max_pending_output: usize,
    write_chunk: usize,
    write_stalls: bool,
    with_async: bool,
    tight: bool,
    sizes: Vec<ReadSize>,
}

/// What a byte 0x01 of the stream stands for, with large messages.
const SPACES: usize = 8 * 1024;

fn decode(data: &[u8]) -> (Config, Vec<u8>) {
    let mut at = 0;
    let mut byte = || {
        let b = data.get(at).copied().unwrap_or(0);
        at = (at + 1).min(data.len());
        b
    };
    let flags = byte();
    let framer = match flags & 3 {
        0 => Choice::Lines,
        1 => Choice::Lsp,
        _ => Choice::Concatenated,
    };
    let mut limits = Limits::default();
    let mut max_frame = rpcwire::frame::DEFAULT_MAX_FRAME;
    let mut max_header = Lsp::DEFAULT_MAX_HEADER;
    let mut max_pending_output = Driver::<Lines>::DEFAULT_MAX_PENDING_OUTPUT;
    if flags & 4 != 0 {
        limits.max_message_len = 8 + 8 * byte() as usize;
        max_frame = 8 + 8 * byte() as usize;
        let b = byte();
        limits.max_in_flight = 1 + (b & 7) as usize;
        limits.max_queued = 1 + ((b >> 3) & 7) as usize;
        max_pending_output = 1 + 16 * byte() as usize;
        max_header = 16 + 4 * byte() as usize;
    }
    let write_chunk = if flags & 32 != 0 {
        1 + 4 * byte() as usize
    } else {
        usize::MAX
    };
    let mut sizes = Vec::new();
    for _ in 0..1 + byte() % 8 {
        sizes.push(match byte() {
            0 => ReadSize::Pending,
            b @ 1..=0xef => ReadSize::Bytes(b as usize),
            _ => ReadSize::Bytes(1 + u16::from_le_bytes([byte(), byte()]) as usize),
        });
    }
    if !sizes.iter().any(|s| matches!(s, ReadSize::Bytes(_))) {
        sizes.push(ReadSize::Bytes(1));
    }
    let config = Config {
        framer,
        limits,
        max_frame,
        max_header,
        max_pending_output,
        write_chunk,
        write_stalls: flags & 128 != 0,
        with_async: flags & 8 != 0,
        tight: flags & 16 != 0,
        sizes,
    };
    let rest = &data[at..];
    let stream = if flags & 64 != 0 {
        let mut stream = Vec::with_capacity(rest.len());
        for &b in rest {
            if b == 1 {
                stream.resize(stream.len() + SPACES, b' ');
            } else {
                stream.push(b);
            }
        }
        stream
    } else {
        rest.to_vec()
    };
    (config, stream)
}

/// A framer with the parser's framing turned off: it finds every message
/// end itself and the dispatcher parses each frame (the framer-first path).
struct FramerFirst<F>(F);

impl<F: Framer> Framer for FramerFirst<F> {
    fn next_frame(&mut self, buf: &[u8]) -> Step {
        self.0.next_frame(buf)
    }
    fn encode(&self, message: &[u8], out: &mut Vec<u8>) {
        self.0.encode(message, out)
    }
    fn reset(&mut self) {
        self.0.reset()
    }
    fn finish(&mut self, buf: &[u8]) -> Option<std::ops::Range<usize>> {
        self.0.finish(buf)
    }
    fn refused_start(&self, error: &rpcwire::frame::FrameError, consumed: usize) -> Option<usize> {
        self.0.refused_start(error, consumed)
    }
    fn resynchronises(&self) -> bool {
        self.0.resynchronises()
    }
}

/// Reads and writes done, shared with the run's guard against livelock.
#[derive(Default)]
struct Work(Cell<u64>);

impl Work {
    fn add(&self) {
        self.0.set(self.0.get() + 1);
    }
}

/// Hands out `data` in reads of the chosen sizes, cycling through them.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    sizes: &'a [ReadSize],
    next: usize,
    work: Rc<Work>,
}

impl tokio::io::AsyncRead for Reader<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at == self.data.len() {
            return Poll::Ready(Ok(()));
        }
        let size = self.sizes[self.next % self.sizes.len()];
        self.next += 1;
        self.work.add();
        let n = match size {
            ReadSize::Pending => {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ReadSize::Bytes(n) => n.min(self.data.len() - self.at).min(buf.remaining()),
        };
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

/// Takes at most `chunk` bytes per write; with `stalls`, is not ready
/// every other call.
struct Writer {
    out: Vec<u8>,
    chunk: usize,
    stalls: bool,
    stalled: bool,
    work: Rc<Work>,
}

impl tokio::io::AsyncWrite for Writer {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.stalls {
            self.stalled = !self.stalled;
            if self.stalled {
                self.work.add();
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let n = buf.len().min(self.chunk);
        self.out.extend_from_slice(&buf[..n]);
        self.work.add();
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Polls `fut`, failing when it is polled far more often than the reads
/// and writes it made call for (a driver spinning without progress).
struct Bounded<'w, T> {
    fut: Pin<Box<dyn Future<Output = T> + 'w>>,
    polls: u64,
    base: u64,
    work: Rc<Work>,
}

impl<T> Future for Bounded<'_, T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        self.polls += 1;
        let allowed = self.base + 4 * self.work.0.get();
        assert!(
            self.polls <= allowed,
            "the driver was polled {} times for {} reads and writes: it spins",
            self.polls,
            self.work.0.get()
        );
        self.fut.as_mut().poll(cx)
    }
}

#[derive(Debug)]
struct Outcome {
    out: Vec<u8>,
    /// The largest read the reader made (at most).
    largest_read: usize,
    reason: CloseReason,
    messages_read: u64,
    peak_read_buffer: usize,
    peak_output_bytes: usize,
    peak_output_messages: usize,
}

fn run<F: Framer, K: 'static>(
    d: &Dispatcher<(), K>,
    framer: F,
    config: &Config,
    stream: &[u8],
    sizes: &[ReadSize],
) -> Outcome {
    let work = Rc::new(Work::default());
    let shutdown = Shutdown::new();
    crate::fuzz_rpc::set_stop(Some(shutdown.clone()));
    let driver = Driver::new(framer)
        .limits(config.limits.clone())
        .max_pending_output(config.max_pending_output)
        .shutdown(shutdown);
    let stats = driver.stats();
    let reader = Reader {
        data: stream,
        at: 0,
        sizes,
        next: 0,
        work: Rc::clone(&work),
    };
    let mut writer = Writer {
        out: Vec::new(),
        chunk: config.write_chunk,
        stalls: config.write_stalls,
        stalled: false,
        work: Rc::clone(&work),
    };
    let reason = {
        let fut = Bounded {
            fut: Box::pin(driver.run(d, reader, &mut writer)),
            polls: 0,
            base: 1000 + 4 * stream.len() as u64,
            work,
        };
        RUNTIME.with(|rt| rt.block_on(fut))
    };
    let reason = reason.unwrap_or_else(|e| panic!("in-memory I/O cannot fail: {e}"));
    assert_ne!(
        reason,
        CloseReason::Idle,
        "the driver stopped making progress with input left or replies unwritten"
    );
    let largest_read = sizes
        .iter()
        .map(|s| match s {
            ReadSize::Bytes(n) => *n,
            ReadSize::Pending => 0,
        })
        .max()
        .unwrap_or(0)
        .min(stream.len());
    Outcome {
        out: writer.out,
        largest_read,
        reason,
        messages_read: stats.messages_read(),
        peak_read_buffer: stats.peak_read_buffer(),
        peak_output_bytes: stats.peak_output_bytes(),
        peak_output_messages: stats.peak_output_messages(),
    }
}

/// Runs `stream` through `framer()` as configured and through the
/// comparison path; returns both outcomes.
fn both<F: Framer, K: 'static>(
    d: &Dispatcher<(), K>,
    framer: impl Fn() -> F,
    config: &Config,
    stream: &[u8],
) -> (Outcome, Outcome) {
    let whole = [ReadSize::Bytes(usize::MAX)];
    let a = run(d, framer(), config, stream, &config.sizes);
    let b = if config.framer == Choice::Concatenated {
        run(d, FramerFirst(framer()), config, stream, &whole)
    } else {
        run(d, framer(), config, stream, &whole)
    };
    (a, b)
}

pub fn check(ds: &Dispatchers, data: &[u8]) {
    let (config, stream) = decode(data);
    let stream = &stream[..];
    let (max_frame, max_header) = (config.max_frame, config.max_header);
    let runs = |config: &Config| match (config.with_async, config.tight) {
        (false, false) => with_framer(&ds.sync, config, stream),
        (false, true) => with_framer(&ds.sync_tight, config, stream),
        (true, false) => with_framer(&ds.with_async, config, stream),
        (true, true) => with_framer(&ds.with_async_tight, config, stream),
    };
    fn with_framer<K: 'static>(
        d: &Dispatcher<(), K>,
        config: &Config,
        stream: &[u8],
    ) -> (Outcome, Outcome) {
        let (max_frame, max_header) = (config.max_frame, config.max_header);
        match config.framer {
            Choice::Lines => both(d, || Lines::new().max_frame(max_frame), config, stream),
            Choice::Lsp => both(
                d,
                || Lsp::new().max_frame(max_frame).max_header(max_header),
                config,
                stream,
            ),
            Choice::Concatenated => both(
                d,
                || Concatenated::new().max_frame(max_frame),
                config,
                stream,
            ),
        }
    }
    let (a, b) = runs(&config);
    // Large messages are mostly spaces: shown in part.
    let show_bytes = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(16 * 1024)]).into_owned();
    let show = |o: &Outcome| show_bytes(&o.out);
    let what = || {
        format!(
            "{config:?}\nstream: {:?}\nconfigured: {:?} {} messages\n{}\ncompared: {:?} {} messages\n{}",
            show_bytes(stream),
            a.reason,
            a.messages_read,
            show(&a),
            b.reason,
            b.messages_read,
            show(&b)
        )
    };
    let replies_a =
        split_replies(config.framer, &a.out).unwrap_or_else(|e| panic!("{e}\n{}", what()));
    let replies_b =
        split_replies(config.framer, &b.out).unwrap_or_else(|e| panic!("{e}\n{}", what()));
    if std::env::var_os("STREAM_CHECK_SHOW").is_some() {
        eprintln!("{}", what());
    }
    // Questions to the client (`ask`'s) and notices about them travel
    // with the replies; each is checked as what it is.
    let mut counts = [0u64; 2];
    for (k, replies) in [&replies_a, &replies_b].into_iter().enumerate() {
        for r in replies {
            match check_outgoing(r) {
                Ok(Outgoing::Reply) => counts[k] += 1,
                Ok(Outgoing::ToClient) => {}
                Err(e) => panic!("{e}: {}\n{}", String::from_utf8_lossy(r), what()),
            }
        }
    }
    // Every message gets at most one reply, a framing error that closes
    // the stream one more.
    for (o, n) in [(&a, counts[0]), (&b, counts[1])] {
        assert!(
            n <= o.messages_read + 1,
            "{n} replies to {} messages\n{}",
            o.messages_read,
            what()
        );
    }
    for (o, replies) in [(&a, &replies_a), (&b, &replies_b)] {
        check_memory(&config, o, replies, max_frame, max_header, stream.len())
            .unwrap_or_else(|e| panic!("{e}\n{}", what()));
    }
    if config.with_async && stream.windows(5).any(|w| w == b"\"ask\"") {
        // Whether the client's answer came before its question depends on
        // the reads: checked above, not compared.
        return;
    }
    assert_eq!(
        (a.reason, a.messages_read),
        (b.reason, b.messages_read),
        "the runs end differently\n{}",
        what()
    );
    if config.with_async {
        // Replies are written as they complete: the same ones, in any order.
        let (mut sa, mut sb) = (replies_a.clone(), replies_b.clone());
        sa.sort();
        sb.sort();
        assert!(sa == sb, "the runs answer differently\n{}", what());
    } else {
        assert!(a.out == b.out, "the runs write different bytes\n{}", what());
    }
}

/// The driver's buffers stay within a small multiple of the limits.
fn check_memory(
    config: &Config,
    o: &Outcome,
    replies: &[&[u8]],
    max_frame: usize,
    max_header: usize,
    stream_len: usize,
) -> Result<(), String> {
    // Bytes not yet framed: at most about one message (the framer's limit,
    // with its header for LSP) and one read.
    let largest_read = o.largest_read;
    let header = if config.framer == Choice::Lsp {
        max_header
    } else {
        0
    };
    let read_bound = max_frame
        .saturating_add(header)
        .saturating_add(largest_read)
        .saturating_add(64)
        .min(stream_len);
    if o.peak_read_buffer > read_bound {
        return Err(format!(
            "read buffer peaked at {} bytes (frame limit {max_frame}, header limit {header}, largest read {largest_read})",
            o.peak_read_buffer
        ));
    }
    // Output pending: below its bound until the last message was taken,
    // which adds its reply; the replies of the calls already running are
    // queued too (documented: the output may pass the bound by their
    // size), at most `max_in_flight` of them.
    let framed = |r: &[u8]| r.len() + 32;
    let largest_reply = replies.iter().map(|r| framed(r)).max().unwrap_or(0);
    let replies_over = config.limits.max_in_flight.max(1) + 1;
    let out_bound = config.max_pending_output + replies_over * largest_reply;
    if o.peak_output_bytes > out_bound {
        return Err(format!(
            "output peaked at {} bytes (bound {}, largest framed reply {largest_reply}, in flight {})",
            o.peak_output_bytes, config.max_pending_output, config.limits.max_in_flight
        ));
    }
    if o.peak_output_messages > config.limits.max_queued + replies_over + 1 {
        return Err(format!(
            "output peaked at {} messages (max_queued {}, in flight {})",
            o.peak_output_messages, config.limits.max_queued, config.limits.max_in_flight
        ));
    }
    Ok(())
}

/// Cuts the output into its messages, checking the framing.
fn split_replies(framer: Choice, out: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut replies = Vec::new();
    let mut rest = out;
    while !rest.is_empty() {
        let (message, after) = match framer {
            Choice::Lines => {
                let end = rest
                    .iter()
                    .position(|&b| b == b'\n')
                    .ok_or("the last line has no newline")?;
                (&rest[..end], &rest[end + 1..])
            }
            Choice::Lsp => {
                const HEAD: &[u8] = b"Content-Length: ";
                if !rest.starts_with(HEAD) {
                    return Err("an LSP frame without its header".into());
                }
                let digits = rest[HEAD.len()..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                let n: usize = std::str::from_utf8(&rest[HEAD.len()..HEAD.len() + digits])
                    .unwrap()
                    .parse()
                    .map_err(|e| format!("bad Content-Length: {e}"))?;
                let body = &rest[HEAD.len() + digits..];
                let body = body
                    .strip_prefix(b"\r\n\r\n")
                    .ok_or("no blank line after Content-Length")?;
                if body.len() < n {
                    return Err(format!("an LSP frame cut short: {n} declared"));
                }
                (&body[..n], &body[n..])
            }
            Choice::Concatenated => {
                let mut values =
                    serde_json::Deserializer::from_slice(rest).into_iter::<&RawValue>();
                match values.next() {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(format!("not JSON: {e}")),
                    None => return Err("whitespace between replies".into()),
                }
                let end = values.byte_offset();
                if rest.get(end) != Some(&b'\n') {
                    return Err("a value not followed by its newline".into());
                }
                (&rest[..end], &rest[end + 1..])
            }
        };
        replies.push(message);
        rest = after;
    }
    Ok(replies)
}
