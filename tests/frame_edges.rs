//! Edges of the router and the framers found by an adversarial review.

use rpcwire::frame::{Concatenated, Framer, Lines, Lsp, Step};
use rpcwire::router::Router;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Frame(Vec<u8>),
    Garbage(i32),
    Close(i32),
}

fn run_chunks<'a, F: Framer + ?Sized>(
    f: &mut F,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<Ev>, usize) {
    let mut evs = Vec::new();
    let mut buf = Vec::new();
    'c: for chunk in chunks {
        buf.extend_from_slice(chunk);
        let mut at = 0;
        loop {
            let here = &buf[at..];
            let step = f.next_frame(here);
            assert!(step.consumed() <= here.len(), "{step:?}");
            match &step {
                Step::Frame { range, .. } => evs.push(Ev::Frame(here[range.clone()].to_vec())),
                Step::Garbage { error, .. } => evs.push(Ev::Garbage(error.code())),
                Step::NeedMore { .. } => {}
                Step::Close(e) => {
                    evs.push(Ev::Close(e.code()));
                    break 'c;
                }
            }
            at += step.consumed();
            if let Step::NeedMore { .. } = step {
                break;
            }
        }
        buf.drain(..at);
    }
    (evs, buf.len())
}

fn run<F: Framer>(f: &mut F, input: &[u8], chunk: usize) -> Vec<Ev> {
    run_chunks(f, input.chunks(chunk.max(1))).0
}

/// Builds a router on another thread; `None` if it takes longer than `secs`.
fn build_within(names: Vec<String>, secs: u64) -> Option<Router<usize>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = Router::new(names.iter().enumerate().map(|(i, n)| (n.as_str(), i)));
        let _ = tx.send(r);
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .ok()
        .map(|r| r.unwrap())
}

/// Defect: `Router::new` never returned for a set placed through pilots
/// (over 128 names) holding two names whose sampled hash is equal under
/// every seed: the same first eight bytes, and last eight bytes that differ
/// by exactly the xor of their lengths (`hash_sampled` xors the length into
/// the last word). The seed loop retried for ever.
#[test]
fn router_builds_with_names_alike_in_last_word_xor_length() {
    for pair in [
        ["a````````", "a```````"],
        ["account_getuBalance", "account_getBalance"],
    ] {
        let mut names: Vec<String> = (0..200).map(|i| format!("ns_method_{i:04}")).collect();
        names.extend(pair.iter().map(|s| s.to_string()));
        let r = build_within(names.clone(), 20).expect("Router::new did not finish in 20 s");
        for (i, n) in names.iter().enumerate() {
            assert_eq!(r.get(n), Some(&i), "{n}");
        }
        assert_eq!(r.get("a`````````"), None);
        // And in a small set (placed directly, or through pilots if not).
        let small = build_within(pair.iter().map(|s| s.to_string()).collect(), 20).unwrap();
        assert_eq!(
            (small.get(pair[0]), small.get(pair[1])),
            (Some(&0), Some(&1))
        );
    }
}

// ------------------------------------------------------------------------
// Probes that found the code sound; kept as regression tests.

#[test]
fn parse_prefix_every_prefix_is_partial() {
    let msgs: Vec<&[u8]> = vec![
        br#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[1.5e+10,-0.25,true,false,null,"\u00e9\"\\",{"a":[]}]}"#,
        "{\"jsonrpc\":\"2.0\",\"id\":\"é日本🎉\",\"method\":\"m\",\"params\":[\"é日本🎉\"]}".as_bytes(),
        br#"{"jsonrpc":"2.0","id":-12345678901234567890123,"method":"eth\u005fcall"}"#,
        br#"{"jsonrpc":"2.0","id":1E-7,"method":"m","params":{"\ud83c\udf89":1}}"#,
        br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b","params":[0]},1,"x"]"#,
        br#"{"jsonrpc":"2.0","id":7,"result":123}"#,
        br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"x","data":[0.0]}}"#,
        b"  \r\n\t{\"jsonrpc\" : \"2.0\" , \"method\" : \"m\" , \"id\" : 0 }",
        br#"{"\u006aso\u006erpc":"2.0","id":0,"method":"m"}"#,
    ];
    let p = rpcwire::Parser::new();
    for m in msgs {
        let arena = bumpalo::Bump::new();
        match p.parse_prefix(m, &arena) {
            Ok(rpcwire::Status::Complete((_, len))) => assert_eq!(len, m.len()),
            other => panic!(
                "{:?}: {:?}",
                String::from_utf8_lossy(m),
                other.map(|s| s.is_complete())
            ),
        }
        for k in 0..m.len() {
            let arena = bumpalo::Bump::new();
            let got = p.parse_prefix(&m[..k], &arena);
            assert!(
                matches!(got, Ok(rpcwire::Status::Partial)),
                "{:?} prefix {k} {:?}: {:?}",
                String::from_utf8_lossy(m),
                String::from_utf8_lossy(&m[..k]),
                got.map(|s| s.is_complete())
            );
        }
    }
}

/// Defect: a whitespace-only line longer than the limit was skipped when it
/// arrived whole but refused (-32600) when it arrived in pieces: the events
/// depended on the chunking.
#[test]
fn lines_blank_line_over_the_limit_same_events_in_every_chunking() {
    let mut input = vec![b' '; 20];
    input.extend_from_slice(b"\n[1]\n");
    let whole = run(&mut Lines::new().max_frame(8), &input, input.len());
    assert_eq!(whole, vec![Ev::Garbage(-32600), Ev::Frame(b"[1]".to_vec())]);
    for chunk in 1..input.len() {
        let got = run(&mut Lines::new().max_frame(8), &input, chunk);
        assert_eq!(got, whole, "chunks of {chunk}");
    }
}

/// Defect: with no body limit (`max_frame(usize::MAX)`, as the crate itself
/// writes "no limit" for `Concatenated`), a `Content-Length` near 2^64
/// overflowed `base + start + len`: a panic in debug builds, and in release
/// a wrapped end, so a `Frame` whose range ends before it starts.
#[test]
fn lsp_length_near_u64_max_without_a_body_limit_waits_for_the_body() {
    for chunk in [1, 7, 100] {
        let input = b"Content-Length: 18446744073709551615\r\n\r\n{}";
        let mut lsp = Lsp::new().max_frame(usize::MAX).max_skip(u64::MAX);
        assert_eq!(run(&mut lsp, input, chunk), vec![]);
        let mut lsp = Lsp::new().max_frame(usize::MAX);
        let step = lsp.next_frame(b"Content-Length: 18446744073709551600\r\n\r\n{}");
        assert!(matches!(step, Step::NeedMore { .. }), "{step:?}");
    }
}

#[test]
fn lsp_variants() {
    let cases: &[(&[u8], &str)] = &[
        (b"Content-Length: 0002\r\n\r\n{}", "frame"),
        (b"Content-Length:\t2\t\r\n\r\n{}", "frame"),
        (b"Content-Length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}", "frame"),
        (b"CoNtEnT-lEnGtH: 2\r\n\r\n{}", "frame"),
        (b"Content-Length: 2\r\nContent-Length: 02\r\n\r\n{}", "frame"),
    ];
    for &(input, want) in cases {
        for chunk in 1..=input.len() {
            let evs = run(&mut Lsp::new(), input, chunk);
            assert_eq!(want, "frame");
            assert_eq!(
                evs,
                vec![Ev::Frame(b"{}".to_vec())],
                "{:?} chunk {chunk}",
                String::from_utf8_lossy(input)
            );
        }
    }
}

#[test]
fn concat_scalars_and_numbers() {
    for input in [&b"12"[..], b"{}12", b"{}\"a\"", b"{} true"] {
        let evs = run(&mut Concatenated::new(), input, 1);
        assert!(
            matches!(evs.last(), Some(Ev::Close(-32700))),
            "{input:?} {evs:?}"
        );
    }
}

#[test]
fn exact_limit_every_framer() {
    let v = br#"{"a":"0123456789"}"#; // 18 bytes
    let n = v.len();
    for chunk in 1..=n + 4 {
        let mut l = v.to_vec();
        l.extend_from_slice(b"\r\n");
        assert_eq!(
            run(&mut Lines::new().max_frame(n), &l, chunk),
            vec![Ev::Frame(v.to_vec())]
        );
        assert_eq!(
            run(&mut Lines::new().max_frame(n - 1), &l, chunk),
            vec![Ev::Garbage(-32600)]
        );
        assert_eq!(
            run(&mut Concatenated::new().max_frame(n), v, chunk),
            vec![Ev::Frame(v.to_vec())]
        );
        assert_eq!(
            run(&mut Concatenated::new().max_frame(n - 1), v, chunk),
            vec![Ev::Garbage(-32600)]
        );
        let mut s = Vec::new();
        Lsp::new().encode(v, &mut s);
        assert_eq!(
            run(&mut Lsp::new().max_frame(n), &s, chunk),
            vec![Ev::Frame(v.to_vec())]
        );
        assert_eq!(
            run(&mut Lsp::new().max_frame(n - 1), &s, chunk),
            vec![Ev::Garbage(-32600)]
        );
    }
}

#[test]
fn router_many_names_and_near_misses() {
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let alphabet: &[&str] = &["a", "b", "_", "\0", "é", "日", "🎉", "x", "."];
    for size in [1usize, 2, 3, 17, 64, 128, 129, 130, 500, 2048, 3000] {
        let mut map = std::collections::HashMap::new();
        while map.len() < size {
            let len = 1 + (next() % 70) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if s.starts_with("rpc.") {
                continue;
            }
            let v = map.len();
            map.entry(s).or_insert(v);
        }
        let names: Vec<(String, usize)> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let (tx, rx) = std::sync::mpsc::channel();
        let n2 = names.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Router::new(n2).unwrap());
        });
        let r = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("build timed out");
        for (k, v) in &map {
            assert_eq!(r.get(k), Some(v));
            let b = k.as_bytes();
            // near misses: drop last byte, add byte, flip each byte
            assert_eq!(
                r.get_bytes(&b[..b.len() - 1]).copied(),
                map.get(std::str::from_utf8(&b[..b.len() - 1]).unwrap_or("\u{fffe}"))
                    .copied()
            );
            for i in 0..b.len() {
                let mut c = b.to_vec();
                c[i] ^= 1;
                let want = std::str::from_utf8(&c)
                    .ok()
                    .and_then(|s| map.get(s))
                    .copied();
                assert_eq!(r.get_bytes(&c).copied(), want, "{c:?}");
            }
        }
        for _ in 0..5000 {
            let len = (next() % 72) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            assert_eq!(r.get(&s), map.get(&s));
        }
    }
}

#[test]
fn escaped_method_names_route_as_decoded() {
    use rpcwire::{Call, Connection, Dispatcher};
    let d = Dispatcher::builder(())
        .method("eth_call", |call: Call<'_, ()>| call.reply.str("hit"))
        .method("é日", |call: Call<'_, ()>| call.reply.str("uni"))
        .method("a\0b", |call: Call<'_, ()>| call.reply.str("nul"))
        .fallback(|call: Call<'_, ()>| call.reply.str("fallback"))
        .build()
        .unwrap();
    let cases: &[(&[u8], &str)] = &[
        (br#"{"jsonrpc":"2.0","id":1,"method":"eth\u005fcall"}"#, r#""result":"hit""#),
        (br#"{"jsonrpc":"2.0","id":1,"method":"\u0065th_call"}"#, r#""result":"hit""#),
        (br#"{"jsonrpc":"2.0","id":1,"method":"eth_cal\u006C"}"#, r#""result":"hit""#),
        (br#"{"jsonrpc":"2.0","id":1,"method":"\u00e9\u65e5"}"#, r#""result":"uni""#),
        (br#"{"jsonrpc":"2.0","id":1,"method":"a\u0000b"}"#, r#""result":"nul""#),
        (br#"{"jsonrpc":"2.0","id":1,"method":"rpc\u002ediscover"}"#, "-32601"),
        (br#"{"jsonrpc":"2.0","id":1,"method":"\u0072pc.x"}"#, "-32601"),
        (br#"[{"jsonrpc":"2.0","id":1,"method":"eth\u005fcall"},{"jsonrpc":"2.0","id":2,"method":"eth_call"}]"#, r#""result":"hit"}"#),
        (br#"{"jsonrpc":"2.0","id":1,"method":"eth_call\u0000"}"#, r#""result":"fallback""#),
    ];
    for &(input, want) in cases {
        let mut out = Vec::new();
        d.handle(input, &mut Connection::new(), &mut out);
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains(want), "{}: {s}", String::from_utf8_lossy(input));
        if input[0] == b'[' {
            assert_eq!(s.matches("hit").count(), 2, "{s}");
        }
    }
}

/// Defect: the same endless seed loop with the full hash. A set whose long
/// names agree on all four sampled words is hashed on every byte
/// (`hash_full`), which xors the length into its start state before the
/// first chunk: two names with as many 8-byte chunks, first chunks that
/// differ by exactly `len1 * K2 ^ len2 * K2` and the same last eight bytes
/// hash alike under every seed. (Such names are valid `&str`, with control
/// characters; a developer, not a peer, chooses them.)
#[test]
fn router_builds_when_full_hash_names_differ_by_their_length_term() {
    let mut names: Vec<String> = (0..20)
        .map(|i| format!("namespace_prefix{i:08}suffix_of_the_name"))
        .collect();
    names.push("\u{19}8q$\u{15}8!R".into());
    names.push("b\u{2a8}\u{19}8q$\u{15}8!R".into());
    let r = build_within(names.clone(), 20).expect("Router::new did not finish in 20 s");
    for (i, n) in names.iter().enumerate() {
        assert_eq!(r.get(n), Some(&i), "{n:?}");
    }
}

#[test]
fn parse_prefix_invalid_is_never_complete() {
    let p = rpcwire::Parser::new();
    let bad: Vec<Vec<u8>> = vec![
        br#"{"jsonrpc":"2.0","id":01,"method":"a"}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"a","params":[1,]}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"a",}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"a\x"}"#.to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\xff\"}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\x01\"}".to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"a","params":[1.]}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"a","params":[tru]}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"a","params":["\ud800"]}"#.to_vec(),
        br#"[{"jsonrpc":"2.0","id":1,"method":"a"} {"jsonrpc":"2.0","id":2,"method":"a"}]"#
            .to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"a" 1}}"#.to_vec(),
        [
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":"[..],
            &[b'['; 200],
            &[b']'; 200],
            b"}",
        ]
        .concat(),
    ];
    for m in &bad {
        let want_err = serde_json::from_slice::<&serde_json::value::RawValue>(m).is_err();
        for k in 0..=m.len() {
            let arena = bumpalo::Bump::new();
            let got = p.parse_prefix(&m[..k], &arena);
            if let Ok(rpcwire::Status::Complete((_, len))) = got {
                // Complete is fine only for a valid JSON prefix that ends there.
                assert!(
                    serde_json::from_slice::<&serde_json::value::RawValue>(&m[..len]).is_ok(),
                    "{:?} prefix {k}: Complete({len})",
                    String::from_utf8_lossy(m)
                );
            }
        }
        let arena = bumpalo::Bump::new();
        let got = p.parse_prefix(m, &arena).map(|s| s.is_complete());
        if want_err {
            // the whole of an invalid message must not be Complete over its full length
            if let Ok(true) = got {
                let arena = bumpalo::Bump::new();
                let Ok(rpcwire::Status::Complete((_, len))) = p.parse_prefix(m, &arena) else {
                    unreachable!()
                };
                assert!(len < m.len(), "{:?}", String::from_utf8_lossy(m));
            }
            assert!(
                !matches!(got, Ok(false)),
                "Partial for invalid {:?}",
                String::from_utf8_lossy(m)
            );
        }
    }
}

/// A client speaking newline-delimited JSON to an LSP-framed server (the
/// common mix-up) is told what framing was expected, as soon as the first
/// byte shows it, not "malformed header line" after a newline (or nothing
/// at all while no newline comes).
#[test]
fn lsp_json_without_headers_says_which_framing_is_expected() {
    for input in [
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}\n"[..],
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}",
        b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}]\r\n",
    ] {
        let Step::Close(error) = Lsp::new().next_frame(input) else {
            panic!("not closed on {:?}", String::from_utf8_lossy(input));
        };
        let shown = error.to_string();
        assert!(shown.contains("Content-Length"), "{shown}");
        assert!(shown.contains("offset 0"), "{shown}");
        let mut reply = Vec::new();
        error.write_reply(&mut reply);
        let reply: serde_json::Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(reply["error"]["code"], -32700);
        assert!(
            reply["error"]["data"]["reason"]
                .as_str()
                .unwrap()
                .contains("Content-Length"),
            "{reply}"
        );
        // Every chunking gives the same events.
        let whole = run(&mut Lsp::new(), input, input.len());
        for chunk in 1..input.len() {
            assert_eq!(run(&mut Lsp::new(), input, chunk), whole, "chunk {chunk}");
        }
    }
    // A second message in that form is found as well.
    let mut lsp = Lsp::new();
    let good = b"Content-Length: 2\r\n\r\n{}{\"id\":1}\n";
    assert_eq!(
        lsp.next_frame(good),
        Step::Frame {
            range: 21..23,
            consumed: 23
        }
    );
    assert!(matches!(lsp.next_frame(&good[23..]), Step::Close(_)));
}
