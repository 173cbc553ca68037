//! Stream framing: rpcwire's framers + `rpcwire::parse` against what Rust
//! transports do with serde_json today, on the same bytes in the same run.
//!
//! The stream is 24,000 distinct Ethereum requests (DESIGN.md's method mix,
//! viem / ethers / web3.py styles interleaved, numeric, big and string ids),
//! delivered in 64 KiB chunks as a socket would hand them over:
//!
//! * concatenated (geth IPC, each value followed by `\n` as geth writes):
//!   `Concatenated` + `parse` per frame, against serde_json's
//!   `StreamDeserializer` of `&RawValue` over the buffered bytes, keeping an
//!   incomplete last value for the next chunk (the usual shape of a Rust IPC
//!   reader);
//! * newline-delimited (MCP stdio, TCP): `Lines` + `parse` per frame, against
//!   `BufRead::read_until(b'\n')` over a `BufReader` and
//!   `serde_json::from_slice::<&RawValue>` per line (and, as a second peer,
//!   the jsonrpsee-shaped borrowed request struct).
//!
//! Each chunk is copied into a reused buffer, as a read from a socket would,
//! on both sides. Every variant counts its frames and checks the count inside
//! the measured loop, so nothing is optimised away. The framers alone (no
//! parse) are measured too, to show what framing costs, and `parse` alone on
//! the messages already split where they lie in the stream: the ceiling of
//! any framer + `parse`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read};

use rpcwire::frame::{Concatenated, Framer, Lines, Step};
use serde_json::value::RawValue;

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/peers.rs"]
mod peers;

const MESSAGES: usize = 24_000;
const CHUNK: usize = 64 * 1024;

/// `n` distinct requests, client styles mixed as a gateway sees them (the
/// parse bench's stream).
fn requests(n: usize) -> Vec<Vec<u8>> {
    // One line each: the same messages go through the line framer.
    corpus::one_line(corpus::eth_stream(0x5eed_f4a3, n))
}

/// A transport's read loop over `stream` in `CHUNK`-byte reads: the framer
/// cuts frames out of a reused buffer, and `each` sees every frame. Returns
/// the number of frames.
fn drive<F: Framer>(
    framer: &mut F,
    stream: &[u8],
    buf: &mut Vec<u8>,
    mut each: impl FnMut(&[u8]),
) -> usize {
    framer.reset();
    buf.clear();
    let mut frames = 0;
    for chunk in stream.chunks(CHUNK) {
        buf.extend_from_slice(chunk);
        let mut at = 0;
        loop {
            let step = framer.next_frame(&buf[at..]);
            match &step {
                Step::Frame { range, .. } => {
                    each(&buf[at..][range.clone()]);
                    frames += 1;
                }
                Step::NeedMore { .. } => {}
                other => panic!("{other:?}"),
            }
            at += step.consumed();
            if let Step::NeedMore { .. } = step {
                break;
            }
        }
        buf.drain(..at);
    }
    frames
}

/// The fused read loop for concatenated JSON: `Parser::parse_prefix` frames
/// and parses a complete value in one pass; a value cut by the end of the
/// buffer is left to the structural framer, which finds its end without
/// rescanning as more bytes arrive, and is then parsed.
fn drive_prefix(
    framer: &mut Concatenated,
    stream: &[u8],
    buf: &mut Vec<u8>,
    arena: &mut bumpalo::Bump,
) -> (usize, usize) {
    let parser = rpcwire::Parser::new();
    framer.reset();
    buf.clear();
    let (mut frames, mut digest) = (0, 0);
    // Set while a partial value is being followed by the framer.
    let mut framing = false;
    // Bytes the parser took since the framer last saw the stream (told to
    // it with `skip`, as the stream `Driver` does).
    let mut taken = 0;
    for chunk in stream.chunks(CHUNK) {
        buf.extend_from_slice(chunk);
        let mut at = 0;
        loop {
            if framing {
                let step = framer.next_frame(&buf[at..]);
                match &step {
                    Step::Frame { range, .. } => {
                        arena.reset();
                        digest += peers::rpcwire_digest(&buf[at..][range.clone()], arena);
                        frames += 1;
                        framing = false;
                    }
                    Step::NeedMore { .. } => {}
                    other => panic!("{other:?}"),
                }
                at += step.consumed();
                if framing {
                    break;
                }
                continue;
            }
            arena.reset();
            match parser.parse_prefix(&buf[at..], arena) {
                Ok(rpcwire::Status::Complete((msg, len))) => {
                    digest += match msg {
                        rpcwire::message::Message::Single(e) => {
                            // As `rpcwire_digest`, which the frames the
                            // framer takes over get.
                            e.as_entry().and_then(|e| e.request()).map_or(0, |r| {
                                r.method().len()
                                    + r.id().map_or(0, |i| i.as_bytes().len())
                                    + r.params().map_or(0, |p| p.as_bytes().len())
                            })
                        }
                        rpcwire::message::Message::Batch(b) => b.len(),
                    };
                    frames += 1;
                    at += len;
                    taken += len;
                }
                Ok(rpcwire::Status::Partial) => {
                    if buf[at..].iter().all(u8::is_ascii_whitespace) {
                        taken += buf.len() - at;
                        at = buf.len();
                        break;
                    }
                    framer.skip(taken);
                    taken = 0;
                    framing = true;
                }
                Err(e) => panic!("{e}"),
            }
        }
        buf.drain(..at);
    }
    (frames, digest)
}

/// serde_json's stream deserializer over buffered bytes, keeping an
/// incomplete last value for the next chunk.
fn serde_stream(stream: &[u8], buf: &mut Vec<u8>) -> (usize, usize) {
    buf.clear();
    let (mut frames, mut digest) = (0, 0);
    for chunk in stream.chunks(CHUNK) {
        buf.extend_from_slice(chunk);
        let mut values = serde_json::Deserializer::from_slice(buf).into_iter::<&RawValue>();
        let mut at = 0;
        loop {
            match values.next() {
                Some(Ok(raw)) => {
                    frames += 1;
                    digest += raw.get().len();
                    at = values.byte_offset();
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => panic!("{e}"),
                None => {
                    at = values.byte_offset();
                    break;
                }
            }
        }
        buf.drain(..at);
    }
    (frames, digest)
}

/// A `Read` that hands out at most `CHUNK` bytes per call, as a socket does.
struct Chunked<'a>(&'a [u8]);

impl Read for Chunked<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = out.len().min(CHUNK).min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// `BufReader::read_until(b'\n')`, then `parse` on each line.
fn read_lines(
    stream: &[u8],
    line: &mut Vec<u8>,
    mut parse: impl FnMut(&[u8]) -> usize,
) -> (usize, usize) {
    let mut reader = BufReader::with_capacity(CHUNK, Chunked(stream));
    let (mut frames, mut digest) = (0, 0);
    loop {
        line.clear();
        if reader.read_until(b'\n', line).unwrap() == 0 {
            break;
        }
        frames += 1;
        digest += parse(line);
    }
    (frames, digest)
}

fn bench_frame(c: &mut Criterion) {
    let msgs = requests(MESSAGES);
    let mut concat = Vec::new();
    let mut lines = Vec::new();
    for m in &msgs {
        Concatenated::new().encode(m, &mut concat);
        Lines::new().encode(m, &mut lines);
    }
    // Everything reused across iterations, as a connection reuses them.
    let mut arena = bumpalo::Bump::new();
    let mut buf = Vec::with_capacity(2 * CHUNK);
    let mut line = Vec::with_capacity(4096);

    // Before timing: every contestant frames every message (serde_json's
    // and `BufRead`'s counts), and rpcwire's framed parses digest as parsing
    // each message alone does, its frames holding each message's bytes.
    let parsed: usize = msgs
        .iter()
        .map(|m| {
            arena.reset();
            peers::rpcwire_digest(m, &arena)
        })
        .sum();
    let lengths: usize = msgs.iter().map(Vec::len).sum();
    // What `framer` cuts from `stream`: the digest of each frame parsed,
    // and the frames' bytes.
    fn framed<F: Framer>(
        framer: &mut F,
        stream: &[u8],
        buf: &mut Vec<u8>,
        arena: &mut bumpalo::Bump,
    ) -> (usize, usize) {
        let (mut digest, mut bytes) = (0, 0);
        drive(framer, stream, buf, |f| {
            arena.reset();
            digest += peers::rpcwire_digest(f, arena);
            bytes += f.len();
        });
        (digest, bytes)
    }
    let mut framer = Concatenated::new();
    let framed_concat = framed(&mut framer, &concat, &mut buf, &mut arena);
    assert_eq!(framed_concat, (parsed, lengths));
    let framed_lines = framed(&mut Lines::new(), &lines, &mut buf, &mut arena);
    assert_eq!(framed_lines, (parsed, lengths));
    assert_eq!(
        drive_prefix(&mut framer, &concat, &mut buf, &mut arena),
        (MESSAGES, parsed)
    );
    assert_eq!(serde_stream(&concat, &mut buf).0, MESSAGES);
    let raw = |l: &[u8]| serde_json::from_slice::<&RawValue>(l).unwrap().get().len();
    assert_eq!(read_lines(&lines, &mut line, raw).0, MESSAGES);

    let mut g = c.benchmark_group("frame_concatenated");
    g.throughput(Throughput::Bytes(concat.len() as u64));
    let mut framer = Concatenated::new();
    g.bench_function("rpcwire_frame_parse", |b| {
        b.iter(|| {
            let mut digest = 0;
            let n = drive(&mut framer, black_box(&concat), &mut buf, |f| {
                arena.reset();
                digest += peers::rpcwire_digest(f, &arena);
            });
            assert_eq!(n, MESSAGES);
            digest
        })
    });
    g.bench_function("rpcwire_prefix_parse", |b| {
        b.iter(|| {
            let (n, digest) = drive_prefix(&mut framer, black_box(&concat), &mut buf, &mut arena);
            assert_eq!(n, MESSAGES);
            digest
        })
    });
    g.bench_function("serde_json_stream_raw", |b| {
        b.iter(|| {
            let (n, digest) = serde_stream(black_box(&concat), &mut buf);
            assert_eq!(n, MESSAGES);
            digest
        })
    });
    g.bench_function("rpcwire_frame_only", |b| {
        b.iter(|| {
            let mut digest = 0;
            let n = drive(&mut framer, black_box(&concat), &mut buf, |f| {
                digest += f.len()
            });
            assert_eq!(n, MESSAGES);
            digest
        })
    });
    // The floor: parsing the messages where they lie in the stream, already
    // split (no framing, no copy).
    let mut ranges = Vec::with_capacity(MESSAGES);
    let mut at = 0;
    for m in &msgs {
        ranges.push(at..at + m.len());
        at += m.len() + 1;
    }
    g.bench_function("rpcwire_parse_only", |b| {
        b.iter(|| {
            let mut digest = 0;
            let stream = black_box(&concat);
            for r in &ranges {
                arena.reset();
                digest += peers::rpcwire_digest(&stream[r.clone()], &arena);
            }
            digest
        })
    });
    g.finish();

    let mut g = c.benchmark_group("frame_lines");
    g.throughput(Throughput::Bytes(lines.len() as u64));
    let mut framer = Lines::new();
    g.bench_function("rpcwire_frame_parse", |b| {
        b.iter(|| {
            let mut digest = 0;
            let n = drive(&mut framer, black_box(&lines), &mut buf, |f| {
                arena.reset();
                digest += peers::rpcwire_digest(f, &arena);
            });
            assert_eq!(n, MESSAGES);
            digest
        })
    });
    g.bench_function("bufread_serde_json_raw", |b| {
        b.iter(|| {
            let (n, digest) = read_lines(black_box(&lines), &mut line, |l| {
                serde_json::from_slice::<&RawValue>(l).unwrap().get().len()
            });
            assert_eq!(n, MESSAGES);
            digest
        })
    });
    g.bench_function("bufread_serde_json_request", |b| {
        b.iter(|| {
            let (n, digest) = read_lines(black_box(&lines), &mut line, peers::serde_json_raw);
            assert_eq!(n, MESSAGES);
            digest
        })
    });
    g.bench_function("rpcwire_frame_only", |b| {
        b.iter(|| {
            let mut digest = 0;
            let n = drive(&mut framer, black_box(&lines), &mut buf, |f| {
                digest += f.len()
            });
            assert_eq!(n, MESSAGES);
            digest
        })
    });
    g.finish();
}

criterion_group!(benches, bench_frame);
criterion_main!(benches);
