//! `cargo bench --features peers,server --bench stream_driver`
//!
//! The stream server end to end, without a socket: the 24,000 distinct
//! Ethereum requests of `benches/frame.rs`, handed to a
//! `server::stream::Driver` in 64 KiB reads from memory, each answered by a
//! synchronous handler (a hex quantity), every reply framed and written to
//! a sink that counts them.
//!
//! * `concatenated_one_pass`: `Concatenated`, which lets the parser frame
//!   (`Framer::parser_frames`): each complete message is parsed, framed and
//!   started in one pass.
//! * `concatenated_framer_first`: the same framer with that turned off: the
//!   framer's structural scan finds each value's end, then the dispatcher
//!   parses the frame (two passes over every byte).
//! * `lines`: newline-delimited (MCP stdio, TCP), framed by `Lines`.
//!
//! What the difference between the first two shows is what the fused read
//! saves per message on a real connection's path (read, frame, parse,
//! route, handle, write).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rpcwire::frame::{Concatenated, Framer, Lines, Step};
use rpcwire::server::stream::{CloseReason, Driver};
use rpcwire::{Call, Dispatcher};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[path = "support/corpus.rs"]
mod corpus;

const MESSAGES: usize = 24_000;
const CHUNK: usize = 64 * 1024;

/// Reads `data` at most `CHUNK` bytes at a time, as a socket hands them
/// over.
struct Reads<'a>(&'a [u8]);

impl AsyncRead for Reads<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.0.len().min(CHUNK).min(buf.remaining());
        buf.put_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Poll::Ready(Ok(()))
    }
}

/// Counts the bytes and newlines (one per reply in both framings) written.
#[derive(Default)]
struct Sink {
    bytes: usize,
    replies: usize,
}

impl AsyncWrite for Sink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.bytes += buf.len();
        self.replies += memchr::memchr_iter(b'\n', buf).count();
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// `Concatenated` with parser framing turned off (the trait's default).
struct FramerFirst(Concatenated);

impl Framer for FramerFirst {
    fn next_frame(&mut self, buf: &[u8]) -> Step {
        self.0.next_frame(buf)
    }
    fn encode(&self, message: &[u8], out: &mut Vec<u8>) {
        self.0.encode(message, out)
    }
    fn reset(&mut self) {
        self.0.reset()
    }
}

fn dispatcher() -> Dispatcher<u64> {
    let mut b = Dispatcher::builder(0x1234u64);
    for (name, _) in corpus::ETH_MIX {
        b = b.method(*name, |call: Call<'_, u64>| {
            let len = call.params.map_or(0, |p| p.as_bytes().len()) as u64;
            call.reply.u64(*call.state + len)
        });
    }
    b.build().expect("distinct names")
}

fn serve<F: Framer>(
    rt: &tokio::runtime::Runtime,
    d: &Dispatcher<u64>,
    framer: F,
    input: &[u8],
) -> usize {
    let mut sink = Sink::default();
    let reason = rt
        .block_on(Driver::new(framer).run(d, Reads(input), &mut sink))
        .expect("in-memory I/O");
    assert_eq!(reason, CloseReason::Eof);
    assert_eq!(sink.replies, MESSAGES);
    sink.bytes
}

fn bench_driver(c: &mut Criterion) {
    // One line each: the same messages go through the line framer.
    let msgs = corpus::one_line(corpus::eth_stream(0x5eed_f4a3, MESSAGES));
    let (mut concat, mut lines) = (Vec::new(), Vec::new());
    for m in &msgs {
        Concatenated::new().encode(m, &mut concat);
        Lines::new().encode(m, &mut lines);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let d = dispatcher();
    let mut g = c.benchmark_group("stream_driver");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(concat.len() as u64));
    g.bench_function("concatenated_one_pass", |b| {
        b.iter(|| serve(&rt, &d, Concatenated::new(), &concat))
    });
    g.bench_function("concatenated_framer_first", |b| {
        b.iter(|| serve(&rt, &d, FramerFirst(Concatenated::new()), &concat))
    });
    g.bench_function("lines", |b| b.iter(|| serve(&rt, &d, Lines::new(), &lines)));
    g.finish();
}

criterion_group!(benches, bench_driver);
criterion_main!(benches);
