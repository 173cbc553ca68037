//! Runs one input through the WebSocket transport's driver
//! (`WsServer::serve_connection`) twice, as a client's frames delivered in
//! reads of the sizes the input chooses and then whole (each read as large
//! as tungstenite's read buffer takes), and checks what the server wrote:
//! well-formed server frames (unmasked, no frame after the close frame,
//! pongs that echo a ping), every text message a JSON-RPC 2.0 reply or a
//! request or notification to the client, at most one reply per client
//! message (one more for a message refused for its size), a close frame
//! whose code matches why the connection ended, no request started after
//! one that shut the server down, and, on a run that ended idle
//! (everything read and answered), a reply to every plain request. Both
//! runs must end for the same reason with the same close code and write
//! the same text messages: in the same order with the sync dispatcher, in
//! any order with the async one (its replies are written as they
//! complete). Used by the `ws` fuzz target and the corpus replay.
//!
//! The input is decoded as:
//!
//! * byte 0, flags: bit 0 the dispatcher with async methods; bit 1 the
//!   dispatcher with a batch limit of 2 and a reply limit of 256 bytes;
//!   bit 2 small limits (two bytes follow); bit 3 a writer taking a few
//!   bytes per write (one byte follows); bit 4 a writer that is not ready
//!   every other call; bit 5 large messages (each byte 0x0e of a message
//!   stands for 8 KiB of spaces, so that frames pass the driver's 32 and
//!   64 KiB thresholds, up to 1 MiB in all); bits 6-7 unused;
//! * with small limits: `max_in_flight` (1 + low 3 bits) and `max_queued`
//!   (1 + next 3 bits), then `max_message_len` (16 + 4 b);
//! * with a chunked writer: bytes per write (1 + b);
//! * the read sizes, cycled: a count (1 + b % 8), then each size: 0 the
//!   reader is not ready once (`Pending`, woken at once), up to 0xEF that
//!   many bytes, else two more bytes: 1 + that u16;
//! * the rest: the client's frames, one per piece between `\n` bytes
//!   (empty pieces skipped). A piece's first byte may choose its frame:
//!   0x01 binary, 0x02 ping, 0x03 pong (control payloads cut to 125
//!   bytes), 0x04 a text message in two fragments, 0x05 the same with a
//!   ping between them, 0x06 a close frame (1000, the rest as reason),
//!   0x07 a text frame that is not UTF-8 (closed with 1007), 0x08 a frame
//!   with a reserved opcode (closed with 1002); any other piece is a text
//!   frame, or a binary one if it is not UTF-8 (so that random bytes are
//!   mostly -32700s, not protocol errors). Every frame is masked.
//!
//! When its bytes are all handed out the client goes quiet without
//! closing (the reader stays pending, unwoken), so that a run ends the
//! same way whatever the reads: by the server's idle timeout on tokio's
//! paused clock, a shutdown (`stop`), a protocol error, a message too
//! large, or the client's close frame.
//!
//! Handlers are deterministic: `echo`, `add`, `fail`, `big`, `later` (the
//! async dispatchers' is ready when first polled), `stop` (triggers the
//! server's shutdown signal), and `ask` (async dispatchers): it asks the
//! client `client/ping` with its params (ids count from 1 per connection,
//! so an input can carry the answer) and replies with the answer's result.
//! Whether an answer arrives before or after its question depends on the
//! reads, so an input naming `"ask"` with the async dispatcher is checked
//! for valid output only, not compared across runs.
#![allow(dead_code)]

// The includer declares `fuzz_rpc` (`support/fuzz_rpc.rs`) at its root.
pub use crate::fuzz_rpc::{Dispatchers, dispatchers};
use crate::fuzz_rpc::{Outgoing, check_outgoing};

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use rpcwire::Dispatcher;
use rpcwire::server::Limits;
use rpcwire::server::ws::{CloseReason, WsServer};
use serde_json::value::RawValue;

thread_local! {
    /// One runtime per thread, its clock paused: the clock moves only when
    /// every task waits, so the idle timeout (120 s) that ends most runs
    /// costs nothing, and timers fire in the same order in every run.
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
}

#[derive(Clone, Copy, Debug)]
enum ReadSize {
    Bytes(usize),
    Pending,
}

/// One frame the client sends, as decoded (kept for the failure report).
#[derive(Clone, Debug, PartialEq, Eq)]
enum ClientFrame {
    Text(Vec<u8>),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    /// A text message in two fragments, with a ping between them or not.
    Fragmented {
        first: Vec<u8>,
        rest: Vec<u8>,
        ping_between: bool,
    },
    Close(Vec<u8>),
    /// A text frame whose payload ends with a byte that is never UTF-8.
    NotUtf8(Vec<u8>),
    /// A frame with the reserved opcode 0x3.
    BadOpcode(Vec<u8>),
}

impl ClientFrame {
    /// The data message this frame carries to the dispatcher, if any.
    fn message(&self) -> Option<Vec<u8>> {
        match self {
            ClientFrame::Text(p) | ClientFrame::Binary(p) => Some(p.clone()),
            ClientFrame::Fragmented { first, rest, .. } => Some([&first[..], rest].concat()),
            ClientFrame::NotUtf8(p) => Some(p.clone()),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
struct Config {
    with_async: bool,
    tight: bool,
    limits: Limits,
    write_chunk: usize,
    write_stalls: bool,
    sizes: Vec<ReadSize>,
    frames: Vec<ClientFrame>,
}

/// What a byte 0x0e of a message stands for, with large messages.
const SPACES: usize = 8 * 1024;
/// The most bytes large messages expand to, in all (the runs stay fast).
const MAX_EXPANDED: usize = 1 << 20;
/// The mask every client frame is sent with (RFC 6455's example), so that
/// the server's unmasking is exercised.
const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn decode(data: &[u8]) -> Config {
    let mut at = 0;
    let mut byte = || {
        let b = data.get(at).copied().unwrap_or(0);
        at = (at + 1).min(data.len());
        b
    };
    let flags = byte();
    let mut limits = Limits::default();
    if flags & 4 != 0 {
        let b = byte();
        limits.max_in_flight = 1 + (b & 7) as usize;
        limits.max_queued = 1 + ((b >> 3) & 7) as usize;
        limits.max_message_len = 16 + 4 * byte() as usize;
    }
    let write_chunk = if flags & 8 != 0 {
        1 + byte() as usize
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
    let large = flags & 32 != 0;
    let mut expanded = 0;
    let mut expand = |piece: &[u8]| -> Vec<u8> {
        if !large {
            return piece.to_vec();
        }
        let mut out = Vec::with_capacity(piece.len());
        for &b in piece {
            if b == 0x0e && expanded < MAX_EXPANDED {
                out.resize(out.len() + SPACES, b' ');
                expanded += SPACES;
            } else {
                out.push(b);
            }
        }
        out
    };
    let control = |p: &[u8]| p[..p.len().min(125)].to_vec();
    let frames = data[at..]
        .split(|&b| b == b'\n')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let rest = &piece[1..];
            match piece[0] {
                0x01 => ClientFrame::Binary(expand(rest)),
                0x02 => ClientFrame::Ping(control(rest)),
                0x03 => ClientFrame::Pong(control(rest)),
                m @ (0x04 | 0x05) => {
                    let message = expand(rest);
                    let (first, rest) = message.split_at(message.len() / 2);
                    ClientFrame::Fragmented {
                        first: first.to_vec(),
                        rest: rest.to_vec(),
                        ping_between: m == 0x05,
                    }
                }
                // The status code takes two of a control frame's 125 bytes.
                0x06 => ClientFrame::Close(rest[..rest.len().min(123)].to_vec()),
                0x07 => ClientFrame::NotUtf8([&expand(rest)[..], &[0xff]].concat()),
                0x08 => ClientFrame::BadOpcode(rest.to_vec()),
                _ => {
                    let message = expand(piece);
                    if std::str::from_utf8(&message).is_ok() {
                        ClientFrame::Text(message)
                    } else {
                        ClientFrame::Binary(message)
                    }
                }
            }
        })
        .collect();
    Config {
        with_async: flags & 1 != 0,
        tight: flags & 2 != 0,
        limits,
        write_chunk,
        write_stalls: flags & 16 != 0,
        sizes,
        frames,
    }
}

/// One masked client frame with `first` (the final bit and the opcode).
fn client_frame(first: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.push(first);
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n @ 126..=65535 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&MASK);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
}

/// The bytes the client sends.
fn encode(frames: &[ClientFrame]) -> Vec<u8> {
    const FIN: u8 = 0x80;
    let mut out = Vec::new();
    for frame in frames {
        match frame {
            ClientFrame::Text(p) => client_frame(FIN | 0x1, p, &mut out),
            ClientFrame::Binary(p) => client_frame(FIN | 0x2, p, &mut out),
            ClientFrame::Ping(p) => client_frame(FIN | 0x9, p, &mut out),
            ClientFrame::Pong(p) => client_frame(FIN | 0xa, p, &mut out),
            ClientFrame::Fragmented {
                first,
                rest,
                ping_between,
            } => {
                client_frame(0x1, first, &mut out);
                if *ping_between {
                    client_frame(FIN | 0x9, b"between", &mut out);
                }
                // Opcode 0: a continuation.
                client_frame(FIN, rest, &mut out);
            }
            ClientFrame::Close(reason) => client_frame(
                FIN | 0x8,
                &[&1000u16.to_be_bytes()[..], reason].concat(),
                &mut out,
            ),
            ClientFrame::NotUtf8(p) => client_frame(FIN | 0x1, p, &mut out),
            ClientFrame::BadOpcode(p) => client_frame(FIN | 0x3, p, &mut out),
        }
    }
    out
}

/// The connection's socket: hands out the client's bytes in reads of the
/// chosen sizes, then stays pending without waking (the client goes quiet
/// and does not close); collects what the server writes, at most `chunk`
/// bytes per write, not ready every other call with `stalls`.
struct Socket<'a> {
    input: &'a [u8],
    at: usize,
    sizes: &'a [ReadSize],
    next: usize,
    out: &'a mut Vec<u8>,
    chunk: usize,
    stalls: bool,
    stalled: bool,
    work: &'a AtomicU64,
}

impl tokio::io::AsyncRead for Socket<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at == self.input.len() {
            // Quiet for good: only the server's timers end the run.
            return Poll::Pending;
        }
        let size = self.sizes[self.next % self.sizes.len()];
        self.next += 1;
        self.work.fetch_add(1, Ordering::Relaxed);
        let n = match size {
            ReadSize::Pending => {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ReadSize::Bytes(n) => n.min(self.input.len() - self.at).min(buf.remaining()),
        };
        let at = self.at;
        buf.put_slice(&self.input[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Socket<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.work.fetch_add(1, Ordering::Relaxed);
        if self.stalls {
            self.stalled = !self.stalled;
            if self.stalled {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let n = buf.len().min(self.chunk);
        self.out.extend_from_slice(&buf[..n]);
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
    work: &'w AtomicU64,
}

impl<T> Future for Bounded<'_, T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        self.polls += 1;
        let work = self.work.load(Ordering::Relaxed);
        let allowed = self.base + 4 * work;
        assert!(
            self.polls <= allowed,
            "the driver was polled {} times for {work} reads and writes: it spins",
            self.polls,
        );
        self.fut.as_mut().poll(cx)
    }
}

/// One run: why it ended and what the server wrote.
#[derive(Debug)]
struct Outcome {
    reason: CloseReason,
    out: Vec<u8>,
}

fn run<K: 'static>(
    d: &Dispatcher<(), K>,
    config: &Config,
    input: &[u8],
    sizes: &[ReadSize],
) -> Outcome {
    let work = AtomicU64::new(0);
    let server = WsServer::new(d.clone()).limits(config.limits.clone());
    crate::fuzz_rpc::set_stop(Some(server.shutdown_signal().clone()));
    let mut out = Vec::new();
    let socket = Socket {
        input,
        at: 0,
        sizes,
        next: 0,
        out: &mut out,
        chunk: config.write_chunk,
        stalls: config.write_stalls,
        stalled: false,
        work: &work,
    };
    let reason = {
        let fut = Bounded {
            fut: Box::pin(server.serve_connection(socket, rpcwire::Context::builder())),
            polls: 0,
            // Timers (two idle ticks, the close's wait, `ask`'s deadlines)
            // wake the driver without reads or writes.
            base: 1000 + 4 * input.len() as u64,
            work: &work,
        };
        RUNTIME.with(|rt| rt.block_on(fut))
    };
    crate::fuzz_rpc::set_stop(None);
    Outcome { reason, out }
}

/// What the server wrote, frame by frame.
#[derive(Debug, Default)]
struct Written {
    /// Text messages, in order.
    texts: Vec<Vec<u8>>,
    pings: usize,
    pongs: Vec<Vec<u8>>,
    /// The close frame's code (`Some(None)`: a close frame without one).
    close: Option<Option<u16>>,
    /// The output ends in a frame cut short.
    cut: bool,
}

/// Cuts the server's output into frames (RFC 6455 §5.2): unmasked, no
/// reserved bits, no binary messages, control frames whole and short,
/// text messages UTF-8, nothing after the close frame. With `cut_allowed`
/// the last frame may be cut short (a connection failed mid-write).
fn parse_output(out: &[u8], cut_allowed: bool) -> Result<Written, String> {
    let mut w = Written::default();
    let mut rest = out;
    // A text message whose fragments are being read.
    let mut partial: Option<Vec<u8>> = None;
    while !rest.is_empty() {
        if w.close.is_some() {
            return Err(format!(
                "{} bytes written after the close frame",
                rest.len()
            ));
        }
        let Some((b0, b1, head, end)) = frame_bounds(rest) else {
            if cut_allowed {
                w.cut = true;
                break;
            }
            return Err(format!(
                "a frame cut short: {:?}",
                &rest[..rest.len().min(64)]
            ));
        };
        let (fin, opcode) = (b0 & 0x80 != 0, b0 & 0x0f);
        if b0 & 0x70 != 0 {
            return Err(format!("reserved bits set: {b0:#04x}"));
        }
        if b1 & 0x80 != 0 {
            return Err("a masked server frame".into());
        }
        let payload = &rest[head..end];
        rest = &rest[end..];
        if opcode >= 0x8 && (!fin || payload.len() > 125) {
            return Err(format!("control frame {opcode:#x} fragmented or too long"));
        }
        match opcode {
            0x1 if partial.is_none() => {
                if fin {
                    w.texts.push(payload.to_vec());
                } else {
                    partial = Some(payload.to_vec());
                }
            }
            0x0 if partial.is_some() => {
                if let Some(mut text) = partial.take() {
                    text.extend_from_slice(payload);
                    if fin {
                        w.texts.push(text);
                    } else {
                        partial = Some(text);
                    }
                }
            }
            0x8 => {
                w.close = Some(match payload {
                    [] => None,
                    [a, b, reason @ ..] => {
                        std::str::from_utf8(reason)
                            .map_err(|_| "a close reason that is not UTF-8")?;
                        Some(u16::from_be_bytes([*a, *b]))
                    }
                    [_] => return Err("a close frame with one byte".into()),
                });
            }
            0x9 => w.pings += 1,
            0xa => w.pongs.push(payload.to_vec()),
            other => return Err(format!("unexpected opcode {other:#x}")),
        }
    }
    if partial.is_some() {
        return Err("a fragmented text message left unfinished".into());
    }
    for text in &w.texts {
        std::str::from_utf8(text).map_err(|_| "a text message that is not UTF-8")?;
    }
    Ok(w)
}

/// The first frame of `out`: its two header bytes, where its payload
/// starts and where it ends (7-, 16- and 64-bit lengths); `None` if it is
/// cut short.
fn frame_bounds(out: &[u8]) -> Option<(u8, u8, usize, usize)> {
    let [b0, b1, ..] = *out else {
        return None;
    };
    let (len, head) = match b1 & 0x7f {
        126 => (
            u64::from(u16::from_be_bytes(out.get(2..4)?.try_into().ok()?)),
            4,
        ),
        127 => (u64::from_be_bytes(out.get(2..10)?.try_into().ok()?), 10),
        n => (u64::from(n), 2),
    };
    let end = usize::try_from(len).ok()?.checked_add(head)?;
    (end <= out.len()).then_some((b0, b1, head, end))
}

/// The close codes a connection closed for `reason` may send.
fn close_codes(reason: CloseReason) -> Result<&'static [u16], String> {
    Ok(match reason {
        CloseReason::Idle | CloseReason::Shutdown => &[1001],
        CloseReason::MessageTooLarge => &[1009],
        CloseReason::Protocol => &[1002, 1007],
        // The client's close is answered by tungstenite (its code echoed),
        // or not, when the stream ended first: not checked.
        CloseReason::Client => &[],
        other => return Err(format!("in-memory I/O cannot end a run: {other:?}")),
    })
}

/// Runs `input` in the configured reads and in reads as large as asked.
fn both<K: 'static>(d: &Dispatcher<(), K>, config: &Config, input: &[u8]) -> (Outcome, Outcome) {
    let whole = [ReadSize::Bytes(usize::MAX)];
    (
        run(d, config, input, &config.sizes),
        run(d, config, input, &whole),
    )
}

/// Runs `data` (decoded as the module docs say) through the WebSocket
/// driver twice and checks both runs' output and their agreement; panics
/// with the decoded scenario and both outputs on a failure.
pub fn check(ds: &Dispatchers, data: &[u8]) {
    let config = decode(data);
    let input = encode(&config.frames);
    let (a, b) = match (config.with_async, config.tight) {
        (false, false) => both(&ds.sync, &config, &input),
        (false, true) => both(&ds.sync_tight, &config, &input),
        (true, false) => both(&ds.with_async, &config, &input),
        (true, true) => both(&ds.with_async_tight, &config, &input),
    };
    // Large messages are mostly spaces: shown in part.
    let show = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(4096)]).into_owned();
    // The server's output as frames, or as bytes if it does not parse.
    let show_out = |out: &[u8]| match parse_output(out, true) {
        Ok(w) => {
            let texts: Vec<String> = w
                .texts
                .iter()
                .map(|t| format!("  text {}", show(t)))
                .collect();
            format!(
                "{}\n  {} pings, pongs {:?}, close {:?}{}",
                texts.join("\n"),
                w.pings,
                w.pongs,
                w.close,
                if w.cut {
                    ", then a frame cut short"
                } else {
                    ""
                }
            )
        }
        Err(e) => format!("  ({e}) {:?}", &out[..out.len().min(4096)]),
    };
    let what = || {
        let frames: Vec<String> = config
            .frames
            .iter()
            .map(|f| match f {
                ClientFrame::Text(p) => format!("text {}", show(p)),
                ClientFrame::Binary(p) => format!("binary {}", show(p)),
                ClientFrame::Fragmented {
                    first,
                    rest,
                    ping_between,
                } => format!(
                    "fragments {} | {} (ping between: {ping_between})",
                    show(first),
                    show(rest)
                ),
                other => format!("{other:?}"),
            })
            .collect();
        format!(
            "async {} tight {} limits (in flight {}, queued {}, message {}) write chunk {} stalls {} reads {:?}\nclient frames:\n  {}\nconfigured reads: {:?}\n{}\nwhole reads: {:?}\n{}",
            config.with_async,
            config.tight,
            config.limits.max_in_flight,
            config.limits.max_queued,
            config.limits.max_message_len,
            config.write_chunk,
            config.write_stalls,
            config.sizes,
            frames.join("\n  "),
            a.reason,
            show_out(&a.out),
            b.reason,
            show_out(&b.out),
        )
    };
    if std::env::var_os("WS_CHECK_SHOW").is_some() {
        eprintln!("{}", what());
    }
    let messages: Vec<Vec<u8>> = config
        .frames
        .iter()
        .filter_map(ClientFrame::message)
        .collect();
    let pings: Vec<&[u8]> = config
        .frames
        .iter()
        .flat_map(|f| match f {
            ClientFrame::Ping(p) => vec![&p[..]],
            ClientFrame::Fragmented {
                ping_between: true, ..
            } => vec![&b"between"[..]],
            _ => vec![],
        })
        .collect();
    // Frames after the client's close break RFC 6455 (§5.5.1: the close
    // is the last frame), and tungstenite fails the connection
    // (`ReceivedAfterClosing`) when it reads one; the driver, closing for
    // `Client`, then drops what it had not flushed (replies written, the
    // echo of the close, even the rest of a frame half written: failing
    // a connection closes it without further ado, §7.1.7). Whether those
    // frames are read before the flush goes through depends on the reads
    // and on the writer's stalls: then the output may end in a frame cut
    // short, and the runs' endings are compared, not what they wrote.
    let after_close = config
        .frames
        .iter()
        .position(|f| matches!(f, ClientFrame::Close(_)))
        .is_some_and(|at| at + 1 < config.frames.len());
    let mut written = Vec::new();
    for o in [&a, &b] {
        let w = parse_output(&o.out, after_close).unwrap_or_else(|e| panic!("{e}\n{}", what()));
        check_run(o.reason, &w, &messages, &pings).unwrap_or_else(|e| panic!("{e}\n{}", what()));
        written.push(w);
    }
    let (wa, wb) = (&written[0], &written[1]);
    if config.with_async && data.windows(5).any(|w| w == b"\"ask\"") {
        // Whether the client's answer came before its question depends on
        // the reads: checked above, not compared.
        return;
    }
    assert_eq!(a.reason, b.reason, "the runs end differently\n{}", what());
    if after_close {
        return;
    }
    assert_eq!(wa.close, wb.close, "the runs close differently\n{}", what());
    if config.with_async {
        // Replies are written as they complete: the same ones, in any order.
        let (mut sa, mut sb) = (wa.texts.clone(), wb.texts.clone());
        sa.sort();
        sb.sort();
        assert!(sa == sb, "the runs answer differently\n{}", what());
    } else {
        assert!(
            wa.texts == wb.texts,
            "the runs write different text messages\n{}",
            what()
        );
    }
}

/// The checks of one run: what each text message is, how many replies,
/// the close frame, requests after a shutdown, replies on an idle end.
fn check_run(
    reason: CloseReason,
    w: &Written,
    messages: &[Vec<u8>],
    pings: &[&[u8]],
) -> Result<(), String> {
    let mut replies = Vec::new();
    for text in &w.texts {
        match check_outgoing(text) {
            Ok(Outgoing::Reply) => replies.push(&text[..]),
            Ok(Outgoing::ToClient) => {}
            Err(e) => return Err(format!("{e}: {}", String::from_utf8_lossy(text))),
        }
    }
    // Every message gets at most one reply; a message refused for its
    // size, one more (its -32600 with `id: null`, before the close).
    if replies.len() > messages.len() + 1 {
        return Err(format!(
            "{} replies to {} messages",
            replies.len(),
            messages.len()
        ));
    }
    if let Some(pong) = w.pongs.iter().find(|p| !pings.contains(&&p[..])) {
        return Err(format!("a pong for no ping: {pong:?}"));
    }
    let codes = close_codes(reason)?;
    if !codes.is_empty() {
        match w.close {
            Some(Some(code)) if codes.contains(&code) => {}
            other => {
                return Err(format!(
                    "closed for {reason:?} with close frame {other:?}, expected {codes:?}"
                ));
            }
        }
    }
    const REFUSED: &[u8] = b"\"code\":-32600,";
    if reason == CloseReason::MessageTooLarge
        && !replies
            .last()
            .is_some_and(|r| r.windows(REFUSED.len()).any(|w| w == REFUSED))
    {
        return Err("a message too large without its -32600 last".into());
    }
    let ids = reply_ids(&replies);
    let requests: Vec<Option<PlainRequest>> = messages.iter().map(|m| plain_request(m)).collect();
    // A `stop` answered shut the server down: no message after it starts
    // (its reply would show, by an id no message before carries).
    let stopped = requests.iter().position(|r| {
        r.as_ref()
            .is_some_and(|r| r.method == "stop" && w.texts.iter().any(|t| is_true_reply(t, r.id)))
    });
    if let Some(at) = stopped {
        let earlier: Vec<u64> = messages[..=at].iter().flat_map(|m| numbers(m)).collect();
        for r in requests[at + 1..].iter().flatten() {
            if !earlier.contains(&r.id) && ids.contains(&r.id) {
                return Err(format!(
                    "request {} ({}) after a stop was answered: started after the shutdown",
                    r.id, r.method
                ));
            }
        }
    }
    // Ending idle, the server had read everything and finished every call
    // (a call at the in-flight limit pauses the idle clock; `ask`'s
    // question times out in 1 s): every plain request was answered.
    if reason == CloseReason::Idle {
        for r in requests.iter().flatten() {
            let asked = requests.iter().flatten().filter(|q| q.id == r.id).count();
            let got = ids.iter().filter(|&&id| id == r.id).count();
            if got < asked {
                return Err(format!(
                    "{asked} requests with id {} ({}), {got} replies, and the run ended idle: a reply lost",
                    r.id, r.method
                ));
            }
        }
    }
    Ok(())
}

/// A request no transport or parser limit can refuse before its id is
/// known: an object of `"jsonrpc":"2.0"`, an integer id, a method without
/// escapes, params an array or object of little depth, each member once.
struct PlainRequest {
    id: u64,
    method: String,
}

fn plain_request(message: &[u8]) -> Option<PlainRequest> {
    let Members(members) = serde_json::from_slice(message).ok()?;
    let mut seen = std::collections::BTreeSet::new();
    let (mut id, mut method, mut version) = (None, None, false);
    for (key, value) in &members {
        if !seen.insert(key.as_str()) {
            return None;
        }
        let v = value.get();
        match key.as_str() {
            "jsonrpc" => version = v == "\"2.0\"",
            "id" => {
                if v.len() > 15 || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                id = v.parse().ok();
            }
            "method" => {
                let name = v.strip_prefix('"')?.strip_suffix('"')?;
                if name.contains('\\') {
                    return None;
                }
                method = Some(name.to_owned());
            }
            "params" => {
                if !(v.starts_with('[') || v.starts_with('{')) || depth(v.as_bytes()) > 32 {
                    return None;
                }
            }
            _ => return None,
        }
    }
    Some(PlainRequest {
        id: id?,
        method: method.filter(|_| version)?,
    })
}

/// An object's members in order, duplicates kept.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Self::Value, M::Error> {
                let mut members = Vec::new();
                while let Some(member) = m.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// The deepest nesting of arrays and objects in `json` (strings skipped).
fn depth(json: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Every run of digits in `bytes`, as a number: the ids a message might
/// carry, however the server reads it.
fn numbers(bytes: &[u8]) -> Vec<u64> {
    bytes
        .split(|b| !b.is_ascii_digit())
        .filter(|d| !d.is_empty())
        .filter_map(|d| std::str::from_utf8(d).ok()?.parse().ok())
        .collect()
}

/// The integer ids of the replies (batch entries each).
fn reply_ids(replies: &[&[u8]]) -> Vec<u64> {
    let id_of = |r: &[u8]| -> Option<u64> {
        let Members(members) = serde_json::from_slice(r).ok()?;
        let (_, id) = members.iter().find(|(k, _)| k == "id")?;
        id.get().parse().ok()
    };
    let mut ids = Vec::new();
    for reply in replies {
        if reply.first() == Some(&b'[') {
            let items: Vec<&RawValue> = serde_json::from_slice(reply).unwrap_or_default();
            ids.extend(items.iter().filter_map(|i| id_of(i.get().as_bytes())));
        } else {
            ids.extend(id_of(reply));
        }
    }
    ids
}

/// Whether `text` is the reply `{"jsonrpc":"2.0","id":<id>,"result":true}`.
fn is_true_reply(text: &[u8], id: u64) -> bool {
    let Ok(Members(members)) = serde_json::from_slice(text) else {
        return false;
    };
    let get = |k: &str| {
        members
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.get())
    };
    get("id") == Some(&id.to_string()) && get("result") == Some("true")
}
