//! Tests shared by the three framers: the same messages, framed by each and
//! fed in every chunking, must come out as the same frames in order.

use super::*;

/// What a transport sees, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Frame(Vec<u8>),
    /// A refused message, by the code of its error reply.
    Garbage(i32),
}

#[derive(Debug)]
pub(crate) struct Run {
    pub events: Vec<Outcome>,
    pub closed: Option<FrameError>,
    /// Bytes left in the buffer at the end.
    pub left: usize,
    /// The most bytes the buffer ever held (after a chunk was appended).
    pub max_held: usize,
}

/// Feeds `chunks` one after another the way a transport does, checking the
/// calling contract's promises on every step.
pub(crate) fn run_chunks<'a, F: Framer>(
    framer: &mut F,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Run {
    let mut out = Run {
        events: Vec::new(),
        closed: None,
        left: 0,
        max_held: 0,
    };
    let mut buf = Vec::new();
    'chunks: for chunk in chunks {
        buf.extend_from_slice(chunk);
        out.max_held = out.max_held.max(buf.len());
        let mut at = 0;
        loop {
            let here = &buf[at..];
            let step = framer.next_frame(here);
            assert!(step.consumed() <= here.len(), "{step:?} of {}", here.len());
            match &step {
                Step::Frame { range, consumed } => {
                    assert!(
                        range.start <= range.end && range.end <= *consumed,
                        "{step:?}"
                    );
                    out.events
                        .push(Outcome::Frame(here[range.clone()].to_vec()));
                }
                Step::Garbage { consumed, error } => {
                    assert!(*consumed > 0, "{step:?}");
                    out.events.push(Outcome::Garbage(error.code()));
                }
                Step::NeedMore { .. } => {}
                Step::Close(error) => {
                    out.closed = Some(*error);
                    break 'chunks;
                }
            }
            at += step.consumed();
            if let Step::NeedMore { .. } = step {
                break;
            }
        }
        buf.drain(..at);
    }
    out.left = buf.len();
    out
}

/// Feeds `input` in chunks of `chunk` bytes.
pub(crate) fn run<F: Framer>(framer: &mut F, input: &[u8], chunk: usize) -> Run {
    run_chunks(framer, input.chunks(chunk.max(1)))
}

/// Feeds `input` in one piece.
pub(crate) fn feed_whole<F: Framer>(framer: &mut F, input: &[u8]) -> Run {
    run(framer, input, input.len())
}

/// Compact messages: what every framer carries, `Lines` included.
fn compact_messages() -> Vec<Vec<u8>> {
    let list: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
        r#"{"jsonrpc":"2.0","id":"a}b]c{d[","method":"x","params":["}","]","{","[","}}]]"]}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"q","params":{"s":"quote \" brace } bracket ] backslash \\ end\\","t":"\\\"","u":"\\\\"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"n","params":["line\nbreak\r\ttab\/","\u00e9\u65e5\ud83c\udf89","é日本語🎉"]}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"deep","params":[[[[{"a":[{"b":{"c":[[],{}]}}]}]]]]}"#,
        r#"[{"jsonrpc":"2.0","id":5,"method":"a"},{"jsonrpc":"2.0","method":"b","params":[]},{"jsonrpc":"2.0","id":null,"method":"c","params":{"x":"]"}}]"#,
        r#"{"jsonrpc": "2.0", "method": "eth_getBalance", "params": ["0x407d73d8a49eeb85d32cf465507dd71d507100c1", "latest"], "id": 7}"#,
        r#"{"method":"eth_call","params":[{"to":"0x6b175474e89094c44da98b954eedeac495271d0f","data":"0x70a08231000000000000000000000000"},"latest"],"id":8,"jsonrpc":"2.0"}"#,
        r#"["\\"]"#,
        r#"["\\\\",{"\"":"\\\""}]"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"eth_chainId","params":[1e3,-0.5,true,false,null]}"#,
        "{}",
        "[]",
    ];
    list.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// Compact messages and pretty-printed ones (newlines inside): what the LSP
/// and concatenated framers carry.
fn all_messages() -> Vec<Vec<u8>> {
    let mut v = compact_messages();
    for m in compact_messages().iter().take(6) {
        let value: serde_json::Value = serde_json::from_slice(m).unwrap();
        v.push(serde_json::to_vec_pretty(&value).unwrap());
    }
    // Windows line endings inside, tabs.
    v.push(b"{\r\n\t\"jsonrpc\" :\t\"2.0\",\r\n\t\"method\": \"x\"\r\n}".to_vec());
    v
}

/// One framing of the test messages.
struct Case {
    name: &'static str,
    new: fn() -> Box<dyn Framer>,
    stream: Vec<u8>,
    msgs: Vec<Vec<u8>>,
}

/// The three framings of the test messages, with the separators each allows.
fn streams() -> Vec<Case> {
    let mut out = Vec::new();

    let msgs = compact_messages();
    let mut lines = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        // Line endings and blank lines of every kind between messages.
        match i % 4 {
            0 => lines.extend_from_slice(b""),
            1 => lines.extend_from_slice(b"\n"),
            2 => lines.extend_from_slice(b"\r\n \t\r\n"),
            _ => lines.extend_from_slice(b"  \n\n"),
        }
        lines.extend_from_slice(m);
        lines.extend_from_slice(if i % 2 == 0 { b"\n" } else { b"\r\n" });
    }
    out.push(Case {
        name: "lines",
        new: || Box::new(Lines::new()),
        stream: lines,
        msgs,
    });

    let msgs = all_messages();
    let mut lsp = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        if i % 3 == 1 {
            lsp.extend_from_slice(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n");
            lsp.extend_from_slice(format!("content-length: {}\r\n\r\n", m.len()).as_bytes());
            lsp.extend_from_slice(m);
        } else {
            Lsp::new().encode(m, &mut lsp);
        }
    }
    out.push(Case {
        name: "lsp",
        new: || Box::new(Lsp::new()),
        stream: lsp,
        msgs: msgs.clone(),
    });

    let mut concat = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        match i % 4 {
            0 => Concatenated::new().encode(m, &mut concat),
            1 => concat.extend_from_slice(m),
            2 => {
                concat.extend_from_slice(b" \r\n\t");
                concat.extend_from_slice(m);
            }
            _ => {
                concat.extend_from_slice(m);
                concat.extend_from_slice(b"\n\n");
            }
        }
    }
    out.push(Case {
        name: "concatenated",
        new: || Box::new(Concatenated::new()),
        stream: concat,
        msgs,
    });
    out
}

fn frames(msgs: &[Vec<u8>]) -> Vec<Outcome> {
    msgs.iter().map(|m| Outcome::Frame(m.clone())).collect()
}

#[test]
fn the_corpus_messages_are_valid_json() {
    // The corpus itself (not the framers): every message is JSON, so the
    // framers are tested on what they will really carry.
    for m in all_messages() {
        serde_json::from_slice::<serde_json::Value>(&m).unwrap();
    }
}

#[test]
fn whole_stream_gives_every_message() {
    for Case {
        name,
        new,
        stream,
        msgs,
    } in streams()
    {
        let out = feed_whole(&mut new(), &stream);
        assert_eq!(out.events, frames(&msgs), "{name}");
        assert!(out.closed.is_none(), "{name}");
        assert_eq!(out.left, 0, "{name}");
    }
}

#[test]
fn split_at_every_byte() {
    for Case {
        name,
        new,
        stream,
        msgs,
    } in streams()
    {
        let want = frames(&msgs);
        for k in 0..=stream.len() {
            let out = run_chunks(&mut new(), [&stream[..k], &stream[k..]]);
            assert_eq!(out.events, want, "{name}, split at {k}");
            assert!(
                out.closed.is_none() && out.left == 0,
                "{name}, split at {k}"
            );
        }
    }
}

#[test]
fn one_byte_at_a_time() {
    for Case {
        name,
        new,
        stream,
        msgs,
    } in streams()
    {
        let out = run(&mut new(), &stream, 1);
        assert_eq!(out.events, frames(&msgs), "{name}");
        assert_eq!(out.left, 0, "{name}");
        // Never more than one message (and its framing) held at once.
        let longest = msgs.iter().map(Vec::len).max().unwrap();
        assert!(
            out.max_held <= longest + 128,
            "{name}: held {}",
            out.max_held
        );
    }
}

#[test]
fn pseudo_random_chunkings() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for Case {
        name,
        new,
        stream,
        msgs,
    } in streams()
    {
        let want = frames(&msgs);
        for _ in 0..200 {
            let mut chunks = Vec::new();
            let mut at = 0;
            while at < stream.len() {
                let n = (1 + next() % 40) as usize;
                let end = (at + n).min(stream.len());
                chunks.push(&stream[at..end]);
                at = end;
            }
            let out = run_chunks(&mut new(), chunks);
            assert_eq!(out.events, want, "{name}");
        }
    }
}

#[test]
fn every_prefix_of_a_message_needs_more() {
    // Incomplete is not invalid: no prefix of a well-framed message is an
    // error or a frame.
    for Case {
        name, new, stream, ..
    } in streams()
    {
        let first_frame_end = match new().next_frame(&stream) {
            Step::Frame { consumed, .. } => consumed,
            other => panic!("{name}: {other:?}"),
        };
        for k in 0..first_frame_end {
            let step = new().next_frame(&stream[..k]);
            assert!(
                matches!(step, Step::NeedMore { .. }),
                "{name}, prefix {k}: {step:?}"
            );
        }
    }
}

#[test]
fn frames_parse_as_requests() {
    // What a transport does next: every framed request reads as one.
    let arena = bumpalo::Bump::new();
    for Case {
        name, new, stream, ..
    } in streams()
    {
        let mut framer = new();
        let mut at = 0;
        loop {
            let step = framer.next_frame(&stream[at..]);
            if let Step::Frame { range, .. } = &step {
                let frame = &stream[at..][range.clone()];
                if frame.len() > 2 {
                    crate::parse(frame, &arena).unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            }
            at += step.consumed();
            if !matches!(step, Step::Frame { .. }) {
                break;
            }
        }
        assert_eq!(at, stream.len(), "{name}");
    }
}

/// A 1 MB message, as the three framers carry it.
fn big_message() -> Vec<u8> {
    let mut m =
        br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":[""#.to_vec();
    let mut x = 1u64;
    while m.len() < 1_000_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        m.push(b"0123456789abcdef"[(x >> 60) as usize]);
    }
    m.extend_from_slice(br#""],"meta":[{"s":"\"}]\\","t":[[[]]]}]}"#);
    m
}

/// A 1 MB value that is hard for a structural scan: short strings full of
/// escapes and brackets, deep nesting, no long runs.
fn big_nasty_message() -> Vec<u8> {
    let mut m = b"[".to_vec();
    while m.len() < 1_000_000 {
        m.extend_from_slice(br#"{"a":"\\\"}]","b":[["\\",{"}":"]"}],[]]},"#);
    }
    m.extend_from_slice(b"null]");
    m
}

#[test]
fn scan_is_linear_in_the_input() {
    for m in [big_message(), big_nasty_message()] {
        // Two messages, so the framing between them is scanned too.
        let mut lines = Vec::new();
        let mut concat = Vec::new();
        let mut lsp = Vec::new();
        for _ in 0..2 {
            Lines::new().encode(&m, &mut lines);
            Concatenated::new().encode(&m, &mut concat);
            Lsp::new().encode(&m, &mut lsp);
        }

        let mut f = Lines::new();
        let out = run(&mut f, &lines, 1024);
        assert_eq!(out.events.len(), 2);
        assert!(
            f.examined <= lines.len(),
            "lines: {} of {}",
            f.examined,
            lines.len()
        );

        // The block scan reads whole 64-byte blocks: at most one block's
        // worth past the end of each frame is read again by the next scan.
        let mut f = Concatenated::new();
        let out = run(&mut f, &concat, 1024);
        assert_eq!(out.events.len(), 2);
        assert!(
            f.examined <= concat.len() + 2 * 64,
            "concatenated: {} of {}",
            f.examined,
            concat.len()
        );

        // The LSP framer reads headers only; a body is waited for by length.
        let mut f = Lsp::new();
        let out = run(&mut f, &lsp, 1024);
        assert_eq!(
            out.events,
            vec![Outcome::Frame(m.clone()), Outcome::Frame(m.clone())]
        );
        assert!(f.examined <= 64, "lsp: {}", f.examined);

        // One byte at a time too (1 MB calls): still each byte once.
        let mut f = Concatenated::new();
        let out = run(&mut f, &concat, 1);
        assert_eq!(out.events.len(), 2);
        assert!(
            f.examined <= concat.len() + 2 * 64,
            "concatenated bytewise: {}",
            f.examined
        );
    }
}

#[test]
fn oversized_messages_are_refused_before_they_are_buffered() {
    // 10 MB messages against the default 5 MiB limit, in 64 KiB chunks: each
    // is refused once a little over 5 MiB has arrived, the rest dropped as it
    // arrives, and the small message after it comes through.
    let mut huge = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[""#.to_vec();
    huge.resize(10_000_000, b'a');
    huge.extend_from_slice(b"\"]}");
    let small = br#"{"jsonrpc":"2.0","id":2,"method":"m"}"#;
    let limit = DEFAULT_MAX_FRAME + 64 * 1024 + 64;
    for (name, mut framer) in [
        ("lines", Box::new(Lines::new()) as Box<dyn Framer>),
        ("lsp", Box::new(Lsp::new())),
        ("concatenated", Box::new(Concatenated::new())),
    ] {
        let mut stream = Vec::new();
        framer.encode(&huge, &mut stream);
        framer.encode(small, &mut stream);
        let out = run(&mut framer, &stream, 64 * 1024);
        assert_eq!(
            out.events,
            vec![Outcome::Garbage(-32600), Outcome::Frame(small.to_vec())],
            "{name}"
        );
        assert!(out.max_held <= limit, "{name}: held {}", out.max_held);
    }
}
