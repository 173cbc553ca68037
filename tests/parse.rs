//! The parser against the JSON-RPC 2.0 specification's examples, every row of
//! DESIGN.md's spec decisions table, and serde_json on real and mutated
//! traffic.

#[path = "../benches/support/corpus.rs"]
mod corpus;
#[path = "support/oracle.rs"]
mod oracle;
#[path = "support/spec.rs"]
mod spec;

use bumpalo::Bump;
use oracle::{Classified, EntryView};
use rpcwire::codes::{INVALID_REQUEST, PARSE_ERROR};
use rpcwire::json::Kind;
use rpcwire::message::Message;
use rpcwire::request::Entry;
use rpcwire::{Category, Error, Parser};

fn parse(input: &str) -> Result<Message<'static>, Error> {
    // Leaked so that tables can hold borrowed results; tests only.
    let arena: &'static Bump = Box::leak(Box::new(Bump::new()));
    let input: &'static [u8] = Box::leak(input.as_bytes().to_vec().into_boxed_slice());
    rpcwire::parse(input, arena)
}

fn single(input: &str) -> Entry<'static> {
    parse(input)
        .unwrap_or_else(|e| panic!("{input}: {e}"))
        .into_single()
        .expect("a single message")
}

fn entries(input: &str) -> Vec<Entry<'static>> {
    parse(input)
        .unwrap_or_else(|e| panic!("{input}: {e}"))
        .into_batch()
        .expect("a batch")
        .collect()
}

#[test]
fn every_example_of_the_specification() {
    for ex in spec::examples() {
        let input = ex.request.as_bytes();
        let reply: Option<serde_json::Value> = ex
            .reply
            .as_deref()
            .map(|r| serde_json::from_str(r).unwrap());
        let arena = Bump::new();
        let parsed = rpcwire::parse(input, &arena);
        match (&reply, parsed) {
            // A single error object answers the whole message.
            (Some(r @ serde_json::Value::Object(_)), Err(e)) => {
                assert_eq!(r["error"]["code"], e.code(), "{}", ex.title);
                assert_eq!(r["id"], serde_json::Value::Null, "{}", ex.title);
            }
            (reply, Ok(Message::Single(entry))) => match entry {
                Entry::Request(req) if req.is_notification() => {
                    assert!(
                        reply.is_none(),
                        "{}: a notification gets no reply",
                        ex.title
                    )
                }
                Entry::Request(req) => {
                    let r = reply.as_ref().unwrap();
                    assert_eq!(
                        r["id"].to_string().as_bytes(),
                        req.id().unwrap().as_bytes(),
                        "{}",
                        ex.title
                    );
                }
                Entry::Invalid(inv) => {
                    let r = reply.as_ref().unwrap();
                    assert_eq!(r["error"]["code"], INVALID_REQUEST, "{}", ex.title);
                    assert_eq!(
                        r["id"].to_string().as_bytes(),
                        inv.id().as_bytes(),
                        "{}",
                        ex.title
                    );
                }
            },
            (reply, Ok(Message::Batch(batch))) => {
                // Replies are the non-notification entries, in order.
                let answered: Vec<Entry> = batch.filter(|e| !e.is_notification()).collect();
                let replies = reply
                    .as_ref()
                    .map_or(vec![], |r| r.as_array().unwrap().clone());
                assert_eq!(answered.len(), replies.len(), "{}", ex.title);
                for (entry, r) in answered.iter().zip(&replies) {
                    match entry {
                        Entry::Invalid(inv) => {
                            assert_eq!(r["error"]["code"], INVALID_REQUEST, "{}", ex.title);
                            assert_eq!(inv.id().as_bytes(), b"null", "{}", ex.title);
                        }
                        Entry::Request(req) => {
                            assert_eq!(
                                r["id"].to_string().as_bytes(),
                                req.id().unwrap().as_bytes(),
                                "{}",
                                ex.title
                            )
                        }
                    }
                }
            }
            (reply, Err(e)) => panic!("{}: unexpected error {e}, reply {reply:?}", ex.title),
        }
    }
}

#[test]
fn spec_examples_read_method_id_and_params() {
    let e = spec::examples();
    let r = single(&e[2].request).request().unwrap();
    assert_eq!(r.method(), "subtract");
    assert_eq!(r.id().unwrap().as_u64(), Some(3));
    let p = r.params().unwrap();
    assert!(p.is_object());
    assert_eq!(p.get("minuend").unwrap().as_u64(), Some(42));
    assert_eq!(p.get("subtrahend").unwrap().as_u64(), Some(23));
    assert_eq!(p.get("absent"), None);
    let r = single(&e[0].request).request().unwrap();
    let p = r.params().unwrap();
    assert_eq!(
        p.iter().map(|v| v.as_i64().unwrap()).collect::<Vec<_>>(),
        [42, 23]
    );
    assert_eq!(p.len(), 2);
    let mixed = entries(&e[13].request);
    assert_eq!(mixed.len(), 6);
    let methods: Vec<&str> = mixed
        .iter()
        .filter_map(|e| e.request())
        .map(|r| r.method())
        .collect();
    assert_eq!(
        methods,
        ["sum", "notify_hello", "subtract", "foo.get", "get_data"]
    );
    assert!(mixed[1].is_notification());
    assert!(mixed[3].invalid().is_some());
}

/// What one row of the table expects.
#[derive(Debug)]
enum Want {
    /// The whole message is an error with this code.
    Whole(i32),
    /// A single request: method, id bytes (None = notification), params.
    Request(&'static str, Option<&'static str>, Option<&'static str>),
    /// A single invalid request answered with this id.
    Invalid(&'static str),
}

fn check(input: &str, want: &Want) {
    let got = parse(input);
    match (want, got) {
        (Want::Whole(code), Err(e)) => assert_eq!(e.code(), *code, "{input}: {e}"),
        (Want::Request(m, id, params), Ok(Message::Single(Entry::Request(r)))) => {
            assert_eq!(r.method(), *m, "{input}");
            assert_eq!(
                r.id().map(|i| i.as_bytes()),
                id.map(str::as_bytes),
                "{input}"
            );
            assert_eq!(
                r.params().map(|p| p.as_bytes()),
                params.map(str::as_bytes),
                "{input}"
            );
        }
        (Want::Invalid(id), Ok(Message::Single(Entry::Invalid(inv)))) => {
            assert_eq!(inv.id().as_bytes(), id.as_bytes(), "{input}");
            assert_eq!(inv.error().code(), INVALID_REQUEST, "{input}");
        }
        (want, got) => panic!("{input}: wanted {want:?}, got {got:?}"),
    }
}

#[test]
fn spec_decisions_table() {
    use Want::*;
    let table: &[(&str, Want)] = &[
        // Bytes that are not one valid JSON value, anywhere.
        (
            r#"{"jsonrpc":"2.0","method":"m","params":[1,],"id":1}"#,
            Whole(PARSE_ERROR),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","params":{"a":01},"id":1}"#,
            Whole(PARSE_ERROR),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1} x"#,
            Whole(PARSE_ERROR),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1}{"jsonrpc":"2.0","method":"m","id":2}"#,
            Whole(PARSE_ERROR),
        ),
        (
            r#"[{"jsonrpc":"2.0","method":"m","id":1}],"#,
            Whole(PARSE_ERROR),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","params":["\x"],"id":1}"#,
            Whole(PARSE_ERROR),
        ),
        (
            r#"[{"jsonrpc":"2.0","method":"m","id":1},{"bad":tru}]"#,
            Whole(PARSE_ERROR),
        ),
        ("", Whole(PARSE_ERROR)),
        ("   ", Whole(PARSE_ERROR)),
        // Valid JSON that is neither object nor array.
        ("1", Whole(INVALID_REQUEST)),
        (r#""a string""#, Whole(INVALID_REQUEST)),
        ("null", Whole(INVALID_REQUEST)),
        (" true ", Whole(INVALID_REQUEST)),
        // `[]`: one error object, not an array.
        ("[]", Whole(INVALID_REQUEST)),
        (" [ \n ] ", Whole(INVALID_REQUEST)),
        // jsonrpc missing or not exactly "2.0": id echoed.
        (r#"{"method":"m","id":7}"#, Invalid("7")),
        (r#"{"jsonrpc":"1.0","method":"m","id":7}"#, Invalid("7")),
        (r#"{"jsonrpc":2.0,"method":"m","id":7}"#, Invalid("7")),
        (
            r#"{"jsonrpc":"2.0 ","method":"m","id":"x"}"#,
            Invalid(r#""x""#),
        ),
        (r#"{"jsonrpc":null,"method":"m","id":7}"#, Invalid("7")),
        (r#"{"jsonrpc":["2.0"],"method":"m","id":7}"#, Invalid("7")),
        // Escapes in the version string are read as any JSON parser would.
        (
            r#"{"jsonrpc":"2\u002e0","method":"m","id":7}"#,
            Request("m", Some("7"), None),
        ),
        // method missing or not a string: id echoed.
        (r#"{"jsonrpc":"2.0","id":7}"#, Invalid("7")),
        (r#"{"jsonrpc":"2.0","method":1,"id":7}"#, Invalid("7")),
        (r#"{"jsonrpc":"2.0","method":null,"id":7}"#, Invalid("7")),
        (
            r#"{"jsonrpc":"2.0","method":{"a":"b"},"id":"q"}"#,
            Invalid(r#""q""#),
        ),
        (r#"{"jsonrpc":"2.0","method":1}"#, Invalid("null")),
        // A method that no &str can hold (unpaired surrogate escape).
        (
            r#"{"jsonrpc":"2.0","method":"a\ud800","id":7}"#,
            Invalid("7"),
        ),
        // id an object, array or boolean: id null.
        (
            r#"{"jsonrpc":"2.0","method":"m","id":{"a":1}}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":[1]}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":true}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":false}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"1.0","method":"m","id":false}"#,
            Invalid("null"),
        ),
        // id a number of any form or a string: accepted, echoed byte for byte.
        (
            r#"{"jsonrpc":"2.0","method":"m","id":-1}"#,
            Request("m", Some("-1"), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1.5}"#,
            Request("m", Some("1.5"), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1e3}"#,
            Request("m", Some("1e3"), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":-0}"#,
            Request("m", Some("-0"), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1.0E-7}"#,
            Request("m", Some("1.0E-7"), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":18446744073709551616}"#,
            Request("m", Some("18446744073709551616"), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":"\u0041"}"#,
            Request("m", Some(r#""\u0041""#), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":""}"#,
            Request("m", Some(r#""""#), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":"6f1c-é"}"#,
            Request("m", Some(r#""6f1c-é""#), None),
        ),
        // id null: a request, answered with null.
        (
            r#"{"jsonrpc":"2.0","method":"m","id":null}"#,
            Request("m", Some("null"), None),
        ),
        // params absent or null: no params.
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1,"params":null}"#,
            Request("m", Some("1"), None),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1,"params":[]}"#,
            Request("m", Some("1"), Some("[]")),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1,"params":{}}"#,
            Request("m", Some("1"), Some("{}")),
        ),
        // params a string, number or boolean: invalid, id echoed.
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1,"params":"x"}"#,
            Invalid("1"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1,"params":3}"#,
            Invalid("1"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1,"params":true}"#,
            Invalid("1"),
        ),
        // The same envelope member twice: id null.
        (
            r#"{"jsonrpc":"2.0","method":"a","method":"b","id":1}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"a","id":1}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"a","id":1,"id":2}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"a","id":1,"params":[],"params":[]}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"a","\u006dethod":"b","id":1}"#,
            Invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"a","i\u0064":1,"id":2}"#,
            Invalid("null"),
        ),
        // Member names compare after unescaping.
        (
            r#"{"\u006asonrpc":"2.0","\u006dethod":"m","\u0069d":5,"par\u0061ms":[1]}"#,
            Request("m", Some("5"), Some("[1]")),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"eth_\u0063all","id":5}"#,
            Request("eth_call", Some("5"), None),
        ),
        // A member name no string type can hold (serde-based readers reject
        // the whole object): invalid, id unreadable.
        (
            r#"{"jsonrpc":"2.0","method":"m","m\udc00":1,"id":1}"#,
            Invalid("null"),
        ),
        // Unknown members are ignored, whatever they hold.
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1,"x":{"method":"evil","id":[]},"methods":1}"#,
            Request("m", Some("1"), None),
        ),
        // Member order does not matter.
        (
            r#"{"id":1,"params":[1],"method":"m","jsonrpc":"2.0"}"#,
            Request("m", Some("1"), Some("[1]")),
        ),
        // A method starting with rpc. parses; the router refuses it.
        (
            r#"{"jsonrpc":"2.0","method":"rpc.discover","id":1}"#,
            Request("rpc.discover", Some("1"), None),
        ),
        // A notification has no id.
        (
            r#"{"jsonrpc":"2.0","method":"m","params":[1]}"#,
            Request("m", None, Some("[1]")),
        ),
        // An empty object, or one without any envelope member.
        ("{}", Invalid("null")),
        (r#"{"foo":"boo"}"#, Invalid("null")),
    ];
    for (input, want) in table {
        check(input, want);
    }
}

#[test]
fn batch_entries_are_classified_in_place_and_in_order() {
    let batch = entries(concat!(
        r#"[{"jsonrpc":"2.0","method":"a","id":1},"#,
        r#"{"jsonrpc":"2.0","method":1,"id":2},"#,
        r#"7,"#,
        r#"{"jsonrpc":"2.0","method":"n"},"#,
        r#"{"jsonrpc":"2.0","method":"d","id":3,"id":4},"#,
        r#"[],"#,
        r#"{"jsonrpc":"2.0","method":"z","id":"last"}]"#
    ));
    assert_eq!(batch.len(), 7);
    assert_eq!(batch[0].request().unwrap().method(), "a");
    assert_eq!(batch[1].invalid().unwrap().id().as_bytes(), b"2");
    assert_eq!(batch[2].invalid().unwrap().id().as_bytes(), b"null");
    assert!(batch[3].is_notification());
    assert_eq!(batch[4].invalid().unwrap().id().as_bytes(), b"null");
    assert_eq!(batch[5].invalid().unwrap().id().as_bytes(), b"null");
    assert_eq!(
        batch[6].request().unwrap().id().unwrap().as_bytes(),
        br#""last""#
    );
    // A batch of only notifications is a batch whose entries all need no reply.
    let quiet = entries(r#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]"#);
    assert!(quiet.iter().all(Entry::is_notification));
}

#[test]
fn limits_are_enforced_with_the_limit_in_data() {
    let arena = Bump::new();
    // Depth: 128 levels in all is accepted by default, 129 is not.
    let nest = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"m","id":1,"params":{}1{}}}"#,
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    assert!(rpcwire::parse(nest(127).as_bytes(), &arena).is_ok());
    let e = rpcwire::parse(nest(128).as_bytes(), &arena).unwrap_err();
    assert_eq!(
        (e.code(), e.category(), e.limit()),
        (PARSE_ERROR, Category::Limit, Some(128))
    );
    let mut data = Vec::new();
    e.write_data(&mut data);
    let data: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(data["limit"], 128);
    let shallow = Parser::new().max_depth(4);
    assert!(shallow.parse(nest(3).as_bytes(), &arena).is_ok());
    assert_eq!(
        shallow
            .parse(nest(4).as_bytes(), &arena)
            .unwrap_err()
            .limit(),
        Some(4)
    );
    // Invalid JSON wins over depth only where it comes first; either way -32700.
    assert_eq!(
        rpcwire::parse(format!("{}x", "[".repeat(200)).as_bytes(), &arena)
            .unwrap_err()
            .code(),
        PARSE_ERROR
    );

    // Batch length: the limit and the batch's length are in the error.
    let batch = |n: usize| {
        let one = r#"{"jsonrpc":"2.0","method":"m","id":1}"#;
        format!("[{}]", vec![one; n].join(","))
    };
    let full = batch(1000);
    let m = rpcwire::parse(full.as_bytes(), &arena).unwrap();
    assert_eq!(m.into_batch().unwrap().len(), 1000);
    let e = rpcwire::parse(batch(1001).as_bytes(), &arena).unwrap_err();
    assert_eq!((e.code(), e.limit()), (INVALID_REQUEST, Some(1000)));
    let mut data = Vec::new();
    e.write_data(&mut data);
    let data: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(data["limit"].as_u64(), Some(1000));
    assert_eq!(&full.as_bytes()[..8], br#"[{"jsonr"#);
    let beyond = data["offset"].as_u64().unwrap() as usize;
    assert_eq!(
        beyond,
        1 + 1000 * (r#"{"jsonrpc":"2.0","method":"m","id":1}"#.len() + 1)
    );
    let small = Parser::new().max_batch_len(2);
    assert!(small.parse(batch(2).as_bytes(), &arena).is_ok());
    assert!(small.parse(batch(3).as_bytes(), &arena).is_err());
    // A too-long batch with a syntax error is a parse error.
    let broken = format!("{},]", &batch(1001)[..batch(1001).len() - 1]);
    assert_eq!(
        rpcwire::parse(broken.as_bytes(), &arena)
            .unwrap_err()
            .code(),
        PARSE_ERROR
    );

    // Message size.
    let tiny = Parser::new().max_message_len(40);
    let msg = br#"{"jsonrpc":"2.0","method":"m","id":1}"#;
    assert!(tiny.parse(msg, &arena).is_ok());
    let e = tiny
        .parse(&[msg.as_slice(), b"     "].concat(), &arena)
        .unwrap_err();
    assert_eq!((e.code(), e.limit()), (INVALID_REQUEST, Some(40)));
}

#[test]
fn errors_name_what_and_where() {
    let table: &[(&str, &str)] = &[
        (
            r#"{"jsonrpc":"2.0","method":"m","id":1"#,
            "unexpected end of input at byte 36",
        ),
        (
            r#"{"jsonrpc":"2.0" "method":"m"}"#,
            "expected ',' or '}' at byte 17",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","params":[1 2]}"#,
            "expected ',' or ']' at byte 42",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":01}"#,
            "expected ',' or '}' at byte 36",
        ),
        ("[1,2,]", "expected a JSON value at byte 5"),
        (
            r#"{"jsonrpc":"2.0","method":"m"} {}"#,
            "trailing characters after the JSON value at byte 31",
        ),
        ("42", "message is neither an object nor an array at byte 0"),
        ("[]", "empty batch at byte 0"),
    ];
    for (input, want) in table {
        assert_eq!(parse(input).unwrap_err().to_string(), *want, "{input}");
    }
    let inv = single(r#"{"jsonrpc":"2.0","method":"m","params":"x","id":1}"#)
        .invalid()
        .unwrap();
    assert_eq!(
        inv.error().to_string(),
        "member 'params' has the wrong type (expected an array, object or null) at byte 39"
    );
    let inv = single(r#"{"jsonrpc":"1.0","method":"m","id":1}"#)
        .invalid()
        .unwrap();
    assert_eq!(
        inv.error().to_string(),
        "'jsonrpc' must be exactly \"2.0\" at byte 11"
    );
    assert_eq!(inv.error().category(), Category::Envelope);
}

#[test]
fn ids_echo_byte_for_byte() {
    for id in [
        "1e3",
        "-0",
        "18446744073709551616",
        r#""\u0041""#,
        "0",
        "-1.25E+10",
        r#""a\"b""#,
        "null",
        "9007199254740993",
    ] {
        let input = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
        let r = single(&input).request().unwrap();
        assert_eq!(r.id().unwrap().as_bytes(), id.as_bytes());
        assert_eq!(r.id().unwrap().as_json(), id);
    }
    let id = single(r#"{"jsonrpc":"2.0","method":"m","id":18446744073709551615}"#)
        .request()
        .unwrap()
        .id()
        .unwrap();
    assert_eq!((id.kind(), id.as_u64()), (Kind::Number, Some(u64::MAX)));
    let id = single(r#"{"jsonrpc":"2.0","method":"m","id":18446744073709551616}"#)
        .request()
        .unwrap()
        .id()
        .unwrap();
    assert_eq!(id.as_u64(), None);
    let id = single(r#"{"jsonrpc":"2.0","method":"m","id":-9223372036854775808}"#)
        .request()
        .unwrap()
        .id()
        .unwrap();
    assert_eq!(id.as_i64(), Some(i64::MIN));
    let id = single(r#"{"jsonrpc":"2.0","method":"m","id":"\u0041"}"#)
        .request()
        .unwrap()
        .id()
        .unwrap();
    assert_eq!(id.kind(), Kind::String);
    assert!(id.as_json_str().unwrap().eq_str("A"));
}

/// Splits compact JSON into tokens (strings kept whole).
fn tokens(compact: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = compact.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                let mut s = String::from('"');
                let mut escaped = false;
                for c in chars.by_ref() {
                    s.push(c);
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push(s);
            }
            '{' | '}' | '[' | ']' | ':' | ',' => out.push(c.to_string()),
            _ => {
                let mut s = c.to_string();
                while let Some(&n) = chars.peek() {
                    if "{}[]:,\"".contains(n) {
                        break;
                    }
                    s.push(n);
                    chars.next();
                }
                out.push(s);
            }
        }
    }
    out
}

#[test]
fn the_four_whitespace_bytes_between_every_token() {
    let compact = concat!(
        r#"[{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0xab","data":"0x12"},"latest",true,null,-1.5e3,{}]},"#,
        r#"{"method":"n","jsonrpc":"2.0"},{"id":"x","jsonrpc":"2.0","method":"m","params":{"a":[]}}]"#
    );
    let toks = tokens(compact);
    assert_eq!(toks.concat(), compact);
    let arena = Bump::new();
    let reference = rpcwire::parse(compact.as_bytes(), &arena)
        .unwrap()
        .into_batch()
        .unwrap();
    for ws in [" ", "\t", "\n", "\r", " \t\n\r", "\r\n"] {
        let spaced = format!("{ws}{}{ws}", toks.join(ws));
        let arena = Bump::new();
        let got =
            rpcwire::parse(spaced.as_bytes(), &arena).unwrap_or_else(|e| panic!("{ws:?}: {e}"));
        let got: Vec<Entry> = got.into_batch().unwrap().collect();
        assert_eq!(got.len(), reference.len());
        for (g, r) in got.iter().zip(reference.clone()) {
            let (g, r) = (g.request().unwrap(), r.request().unwrap());
            assert_eq!(g.method(), r.method());
            assert_eq!(g.id().map(|i| i.as_bytes()), r.id().map(|i| i.as_bytes()));
            // Params keep their inner whitespace; compared as JSON.
            let value = |p: Option<rpcwire::request::Params>| {
                p.map(|p| serde_json::from_slice::<serde_json::Value>(p.as_bytes()).unwrap())
            };
            assert_eq!(value(g.params()), value(r.params()));
        }
        // Positional and named access see through the whitespace.
        let params = got[0].request().unwrap().params().unwrap();
        let values: Vec<&[u8]> = params.iter().map(|v| v.as_bytes()).collect();
        assert_eq!(
            values[1..5],
            [&b"\"latest\""[..], b"true", b"null", b"-1.5e3"]
        );
        assert_eq!(
            params
                .nth(0)
                .unwrap()
                .as_params()
                .unwrap()
                .get("data")
                .unwrap()
                .as_str(),
            Some("0x12")
        );
        assert!(params.nth(5).unwrap().as_params().unwrap().is_empty());
    }
}

#[test]
fn agrees_with_serde_json_on_real_traffic() {
    let parser = Parser::new();
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    for style in corpus::Style::ALL {
        inputs.extend(corpus::eth_singles(1, style, 300));
        inputs.push(corpus::eth_batch(2, style, 100));
    }
    inputs.extend(corpus::eth_stream(4, 1000));
    inputs.extend(corpus::mcp_stream(3, 1000));
    for input in &inputs {
        // Real traffic is valid, and every request in it reads the same.
        assert!(matches!(
            oracle::classify(input),
            Classified::Single(EntryView::Request { .. }) | Classified::Batch(_)
        ));
        oracle::check_agreement(&parser, input);
    }
    for ex in spec::examples() {
        oracle::check_agreement(&parser, ex.request.as_bytes());
    }
}

/// Mutations of valid messages: every prefix, single-byte edits at every
/// position, and pseudo-random multi-byte edits, each checked against
/// serde_json.
#[test]
fn agrees_with_serde_json_on_mutated_traffic() {
    let parser = Parser::new();
    let seeds: Vec<Vec<u8>> = [
        br#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0xab","data":"0x12"},"latest"]}"#.to_vec(),
        br#"[{"jsonrpc":"2.0","method":"a","id":1},{"jsonrpc":"2.0","method":"n"},7]"#.to_vec(),
        br#"{"id":"\u0041","\u006dethod":"m\u00e9","jsonrpc":"2.0","params":{"k":[1.5e3,-0,true,null]}}"#.to_vec(),
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"東京\"}}".as_bytes().to_vec(),
    ]
    .into();
    let replacements: &[u8] = b"{}[]\",:\\ 0-1.eE+tfnu\x00\x1f\x7f\xc3\xa9\xff";
    let mut rng = corpus::Rng::new(0xfeed);
    for seed in &seeds {
        oracle::check_agreement(&parser, seed);
        for cut in 0..seed.len() {
            oracle::check_agreement(&parser, &seed[..cut]);
        }
        for at in 0..seed.len() {
            for &r in replacements {
                let mut m = seed.clone();
                m[at] = r;
                oracle::check_agreement(&parser, &m);
                let mut ins = seed.clone();
                ins.insert(at, r);
                oracle::check_agreement(&parser, &ins);
            }
            let mut del = seed.clone();
            del.remove(at);
            oracle::check_agreement(&parser, &del);
        }
        for _ in 0..3000 {
            let mut m = seed.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(m.len() as u64 + 1) as usize;
                let r = replacements[rng.below(replacements.len() as u64) as usize];
                match rng.below(3) {
                    0 if at < m.len() => m[at] = r,
                    1 => m.insert(at, r),
                    _ if at < m.len() => {
                        m.remove(at);
                    }
                    _ => {}
                }
            }
            oracle::check_agreement(&parser, &m);
        }
    }
}

#[test]
fn deep_nesting_agrees_with_serde_json_up_to_the_limit() {
    let parser = Parser::new();
    for depth in [1usize, 63, 64, 65, 127, 128, 129, 500, 2000] {
        for open in ["[", "{\"k\":"] {
            let close = if open == "[" { "]" } else { "}" };
            let value = format!("{}0{}", open.repeat(depth), close.repeat(depth));
            let msg = format!(r#"{{"jsonrpc":"2.0","method":"m","id":1,"params":[{value}]}}"#);
            oracle::check_agreement(&parser, msg.as_bytes());
        }
    }
}

#[test]
fn responses() {
    let arena = Bump::new();
    let parse = |s: &'static str| rpcwire::parse_response(s.as_bytes(), &arena);
    let rpcwire::response::ResponseMessage::Single(r) =
        parse(r#"{"jsonrpc":"2.0","id":1,"result":"0x1b4"}"#).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.id().as_bytes(), b"1");
    assert_eq!(r.result().unwrap().as_bytes(), br#""0x1b4""#);
    let rpcwire::response::ResponseMessage::Single(r) =
        parse(r#"{"result":{"logs":[{"a":1}]},"id":"q","jsonrpc":"2.0","extra":[1]}"#).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.result().unwrap().as_bytes(), br#"{"logs":[{"a":1}]}"#);
    let rpcwire::response::ResponseMessage::Single(r) =
        parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse \"error\""}}"#)
            .unwrap()
    else {
        panic!()
    };
    let e = r.result().unwrap_err();
    assert_eq!((r.id().is_null(), e.code(), e.data()), (true, -32700, None));
    assert!(e.message().eq_str("Parse \"error\""));
    // Spec examples' replies are all valid responses.
    for ex in spec::examples() {
        if let Some(reply) = ex.reply {
            let arena = Bump::new();
            match rpcwire::parse_response(reply.as_bytes(), &arena).unwrap() {
                rpcwire::response::ResponseMessage::Single(_) => {}
                rpcwire::response::ResponseMessage::Batch(b) => {
                    assert!(b.clone().all(|r| r.is_ok()), "{}", ex.title)
                }
            }
        }
    }
    // A batch keeps order and reports bad elements in place.
    let rpcwire::response::ResponseMessage::Batch(b) = parse(concat!(
        r#"[{"jsonrpc":"2.0","id":2,"result":null},"#,
        r#"{"jsonrpc":"2.0","id":3,"result":1,"error":{"code":1,"message":"x"}},"#,
        r#"{"jsonrpc":"2.0","id":4},"#,
        r#"{"jsonrpc":"2.0","id":5,"error":{"code":1.5,"message":"x"}},"#,
        r#"{"jsonrpc":"2.0","id":6,"error":{"message":"x"}},"#,
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"x","data":{"d":[]}}},"#,
        r#"1,{"id":8,"result":1}]"#
    ))
    .unwrap() else {
        panic!()
    };
    let items: Vec<_> = b.collect();
    assert_eq!(items.len(), 8);
    assert_eq!(items[0].unwrap().result().unwrap().as_bytes(), b"null");
    assert!(items[1].unwrap_err().to_string().contains("both"));
    assert!(
        items[2]
            .unwrap_err()
            .to_string()
            .contains("missing member 'result'")
    );
    assert!(items[3].unwrap_err().to_string().contains("'code'"));
    assert!(
        items[4]
            .unwrap_err()
            .to_string()
            .contains("missing member 'code'")
    );
    assert_eq!(
        items[5]
            .unwrap()
            .result()
            .unwrap_err()
            .data()
            .unwrap()
            .as_bytes(),
        br#"{"d":[]}"#
    );
    assert!(items[6].is_err());
    assert!(items[7].unwrap_err().to_string().contains("'jsonrpc'"));
    // Whole-message problems.
    assert_eq!(
        parse(r#"{"jsonrpc":"2.0","id":1,"result":}"#)
            .unwrap_err()
            .code(),
        PARSE_ERROR
    );
    assert!(parse("[]").is_err());
    assert!(parse(r#"{"jsonrpc":"2.0","id":1,"result":1,"result":2}"#).is_err());
    assert!(parse(r#"{"jsonrpc":"2.0","id":[1],"result":1}"#).is_err());
}

/// An error object's raw bytes are exactly its slice of the input, whatever
/// its shape (`data` absent, `null`, an object, a string with escapes;
/// members in any order; whitespace inside and around; an escaped member
/// name) and whichever reader took it (the compact one, `": "` spacing, the
/// general one), in a batch, a single response and a two-way batch; `data`
/// is still what it was.
#[test]
fn error_objects_keep_their_bytes() {
    use rpcwire::message::{Incoming, Message};
    use rpcwire::response::{ErrorObject, ResponseMessage};
    // (error object, its raw `data`)
    let errors: [(&str, Option<&str>); 10] = [
        (r#"{"code":-32000,"message":"execution reverted"}"#, None),
        (r#"{"code":-32000,"message":"x","data":null}"#, Some("null")),
        (
            r#"{"code":3,"message":"execution reverted","data":{"a":[1,{"b":"c"}]}}"#,
            Some(r#"{"a":[1,{"b":"c"}]}"#),
        ),
        (
            r#"{"code":1,"message":"q\"\\\u00e9","data":"esc \"q\" \\ \u0041\n"}"#,
            Some(r#""esc \"q\" \\ \u0041\n""#),
        ),
        (
            r#"{"code": 7, "message": "m", "data": [1, 2]}"#,
            Some("[1, 2]"),
        ),
        (r#"{"message":"m","code":5}"#, None),
        (
            r#"{"data":{"k":[]},"message":"m","code":-1}"#,
            Some(r#"{"k":[]}"#),
        ),
        (
            "{ \"code\" : -32601 ,\n\t\"message\" : \"nope\" , \"data\" : { \"k\" : 1 } }",
            Some("{ \"k\" : 1 }"),
        ),
        (
            r#"{"c\u006fde":2,"message":"m","d\u0061ta":false,"x":1}"#,
            Some("false"),
        ),
        (
            r#"{"code":0,"message":"","data":"\ud83d\ude00"}"#,
            Some(r#""\ud83d\ude00""#),
        ),
    ];
    let envelopes = [
        r#"{"jsonrpc":"2.0","id":ID,"error":ERR}"#,
        r#"{"jsonrpc": "2.0", "id": ID, "error": ERR}"#,
        "{ \"error\" :\nERR , \"id\":ID,\"jsonrpc\":\"2.0\" }",
        r#"{"error":ERR,"jsonrpc":"2.0","x":[ERR],"id":ID}"#,
    ];
    // Each response, and where its error object sits in it.
    let mut singles = Vec::new();
    for (i, (error, _)) in errors.iter().enumerate() {
        for (j, envelope) in envelopes.iter().enumerate() {
            let id = (i * envelopes.len() + j).to_string();
            let envelope = envelope.replace("ID", &id);
            let at = envelope.find("ERR").unwrap();
            singles.push((envelope.replace("ERR", error), at, at + error.len()));
        }
    }
    // The batch, and where each error object sits in it.
    let mut batch = String::from("[");
    let mut spans = Vec::new();
    for (single, start, end) in &singles {
        if batch.len() > 1 {
            batch.push_str(" ,");
        }
        spans.push((batch.len() + start, batch.len() + end));
        batch.push_str(single);
    }
    batch.push(']');
    let check = |input: &[u8], (start, end): (usize, usize), n: usize, e: ErrorObject<'_>| {
        let (text, data) = errors[n / envelopes.len()];
        assert_eq!(e.as_bytes(), text.as_bytes(), "{n}");
        assert_eq!(
            e.as_bytes().as_ptr_range(),
            input[start..end].as_ptr_range(),
            "{n}"
        );
        assert_eq!(e.raw().as_bytes(), e.as_bytes(), "{n}");
        assert_eq!(e.data().map(|d| d.as_json()), data, "{n}");
        // Still the object serde_json reads.
        let value: serde_json::Value = serde_json::from_slice(e.as_bytes()).unwrap();
        assert_eq!(value["code"], e.code(), "{n}");
    };
    let arena = Bump::new();
    let input = batch.as_bytes();
    let Ok(ResponseMessage::Batch(b)) = rpcwire::parse_response(input, &arena) else {
        panic!()
    };
    assert_eq!(b.len(), spans.len());
    for (n, r) in b.enumerate() {
        let r = r.unwrap_or_else(|e| panic!("{n}: {e}"));
        assert_eq!(r.id().as_u64(), Some(n as u64));
        check(input, spans[n], n, r.result().unwrap_err());
    }
    let Ok(Message::Batch(b)) = Parser::new().parse_incoming(input, &arena) else {
        panic!()
    };
    for (n, entry) in b.enumerate() {
        let Incoming::Response(r) = entry else {
            panic!("{n}: {entry:?}")
        };
        check(input, spans[n], n, r.result().unwrap_err());
    }
    for (n, (single, start, end)) in singles.iter().enumerate() {
        let input = single.as_bytes();
        let Ok(ResponseMessage::Single(r)) = rpcwire::parse_response(input, &arena) else {
            panic!("{single}")
        };
        check(input, (*start, *end), n, r.result().unwrap_err());
    }
    // Equality stays on the contents (code, message, data), not the
    // spacing.
    let spaced = br#"{"jsonrpc":"2.0","id":1,"error":{ "code":1 , "message":"m" }}"#;
    let compact = br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#;
    let error = |input: &'static [u8]| match rpcwire::parse_response(input, &arena) {
        Ok(ResponseMessage::Single(r)) => r.result().unwrap_err(),
        _ => panic!(),
    };
    assert_eq!(error(spaced), error(compact));
    assert_ne!(error(spaced).as_bytes(), error(compact).as_bytes());
}

/// Keeping the error object's bytes did not grow a response: batches store
/// them, and the readers return them by value on the results' hot path.
#[test]
#[cfg(target_pointer_width = "64")]
fn a_response_stays_eight_words() {
    use rpcwire::response::{ErrorObject, Response};
    assert_eq!(size_of::<ErrorObject<'_>>(), 48);
    assert_eq!(size_of::<Response<'_>>(), 64);
    assert_eq!(size_of::<Result<Response<'_>, Error>>(), 64);
}

/// A result decodes as serde_json decodes a value, whatever its kind, with
/// no params rules (`()` does not take `[]`, a tuple is not padded);
/// `decode_in` lends strings with escapes from the arena, `decode` only
/// those without; a failure says where in the value it is.
#[test]
fn raw_json_values_decode_with_serde_semantics() {
    use rpcwire::json::RawJson;
    use rpcwire::response::ResponseMessage;
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Log<'a> {
        #[serde(borrow)]
        address: &'a str,
        topics: Vec<u64>,
    }
    let input = concat!(
        r#"[{"jsonrpc":"2.0","id":0,"result":1},"#,
        r#"{"jsonrpc":"2.0","id":1,"result":-2.5e3},"#,
        r#"{"jsonrpc":"2.0","id":2,"result":"0x1b4"},"#,
        r#"{"jsonrpc":"2.0","id":3,"result":"Ad\u00e8le \"A\"\n"},"#,
        r#"{"jsonrpc":"2.0","id":4,"result":true},"#,
        r#"{"jsonrpc":"2.0","id":5,"result":null},"#,
        r#"{"jsonrpc":"2.0","id":6,"result":[1, 2]},"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{ "address" : "0xab", "topics" : [3] }},"#,
        r#"{"jsonrpc":"2.0","id":8,"result":[]},"#,
        r#"{"jsonrpc":"2.0","id":9,"result":{"address":"0x\u0061b","topics":[1,"x"]}}]"#,
    );
    let arena = Bump::new();
    let Ok(ResponseMessage::Batch(b)) = rpcwire::parse_response(input.as_bytes(), &arena) else {
        panic!()
    };
    let r: Vec<RawJson<'_>> = b.map(|r| r.unwrap().result().unwrap()).collect();
    // Each kind.
    assert_eq!(r[0].decode::<u64>().unwrap(), 1);
    assert_eq!(r[0].decode::<i8>().unwrap(), 1);
    assert_eq!(r[1].decode::<f64>().unwrap(), -2500.0);
    assert_eq!(r[2].decode::<&str>().unwrap(), "0x1b4");
    assert_eq!(r[2].decode::<String>().unwrap(), "0x1b4");
    assert!(r[4].decode::<bool>().unwrap());
    assert_eq!(r[5].decode::<Option<u64>>().unwrap(), None);
    r[5].decode::<()>().unwrap();
    assert_eq!(r[6].decode::<Vec<u64>>().unwrap(), [1, 2]);
    assert_eq!(r[6].decode::<(u8, u8)>().unwrap(), (1, 2));
    let log = Log {
        address: "0xab",
        topics: vec![3],
    };
    assert_eq!(r[7].decode::<Log<'_>>().unwrap(), log);
    assert_eq!(r[7].decode_in::<Log<'_>>(&arena).unwrap(), log);
    assert_eq!(
        r[7].decode::<serde_json::Value>().unwrap(),
        serde_json::json!({"address": "0xab", "topics": [3]})
    );
    // A borrowed `&str`: straight from the message without escapes (with or
    // without an arena), from the arena with them.
    let plain: &str = r[2].decode_in(&arena).unwrap();
    assert_eq!(plain, "0x1b4");
    assert_eq!(plain.as_ptr(), r[2].as_bytes()[1..].as_ptr());
    let escaped: &str = r[3].decode_in(&arena).unwrap();
    assert_eq!(escaped, "Ad\u{e8}le \"A\"\n");
    assert_eq!(r[3].decode::<String>().unwrap(), escaped);
    let e = r[3].decode::<&str>().unwrap_err();
    assert!(e.to_string().contains("expected a borrowed string"), "{e}");
    // Nested escaped strings too.
    let nested: Result<Log<'_>, _> = r[9].decode_in(&arena);
    assert!(nested.is_err()); // "x" is no u64; the address alone decodes:
    #[derive(Debug, serde::Deserialize)]
    struct Address<'a> {
        address: &'a str,
    }
    assert_eq!(
        r[9].decode_in::<Address<'_>>(&arena).unwrap().address,
        "0xab"
    );
    // serde's rules, not the params' ones: no `()` from `[]`, no padding.
    assert!(r[8].decode::<()>().is_err());
    assert!(r[8].decode_in::<()>(&arena).is_err());
    let e = r[0].decode::<(u64, Option<u64>)>().unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid type: integer `1`, expected a tuple"),
        "{e}"
    );
    let e = r[6].decode::<(u64, u64, Option<u64>)>().unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid length 2, expected a tuple of size 3"),
        "{e}"
    );
    // A type mismatch names the reason and where in the value (line and
    // column of the value's own text, not the message's).
    let e = r[2].decode::<u64>().unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid type: string \"0x1b4\", expected u64 at line 1 column 7"
    );
    assert!(e.is_data());
    let e = r[9].decode::<Vec<u64>>().unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid type: map, expected a sequence"),
        "{e}"
    );
    let e = nested.unwrap_err();
    let text = r[9].as_json();
    let x = text.find(r#""x""#).unwrap();
    assert_eq!((e.line(), e.column()), (1, x + 3), "{e}");
    assert!(
        e.to_string()
            .starts_with("invalid type: string \"x\", expected u64"),
        "{e}"
    );
}

/// The compact reader takes the member orders clients write as straight-line
/// code and every other order through a loop: every sequence of up to five
/// member names (repeats, missing members and an unknown member included),
/// compact and in web3.py's spacing, alone and in a batch, reads as
/// serde_json reads it.
#[test]
fn every_member_order_reads_alike() {
    let parser = Parser::new();
    let members = [
        ("jsonrpc", r#""2.0""#),
        ("id", "7"),
        ("method", r#""eth_call""#),
        ("params", r#"["0x1",{"a":1}]"#),
        ("x", "1"),
    ];
    let mut checked = 0;
    for len in 0..=5u32 {
        for mut code in 0..members.len().pow(len) {
            let mut picked = Vec::new();
            for _ in 0..len {
                picked.push(members[code % members.len()]);
                code /= members.len();
            }
            for (colon, comma) in [(":", ","), (": ", ", ")] {
                let body: Vec<String> = picked
                    .iter()
                    .map(|(name, value)| format!("\"{name}\"{colon}{value}"))
                    .collect();
                let single = format!("{{{}}}", body.join(comma));
                oracle::check_agreement(&parser, single.as_bytes());
                let batch = format!("[{single},{single}]");
                oracle::check_agreement(&parser, batch.as_bytes());
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * (1 + 5 + 25 + 125 + 625 + 3125));
}

/// What a response reading says, offsets left out (the same response
/// written with other whitespace has them elsewhere).
fn response_summary(input: &[u8]) -> String {
    use rpcwire::response::{Response, ResponseMessage};
    let arena = Bump::new();
    let value = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
    let error = |e: rpcwire::Error| {
        let text = e.to_string();
        format!("E{} {}", e.code(), text.rsplit_once(" at byte ").unwrap().0)
    };
    let one = |r: Result<Response<'_>, rpcwire::Error>| match r {
        Ok(r) => match r.result() {
            Ok(v) => format!(
                "{} ok {}",
                String::from_utf8_lossy(r.id().as_bytes()),
                value(v.as_bytes())
            ),
            Err(e) => format!(
                "{} err {} {:?} {:?}",
                String::from_utf8_lossy(r.id().as_bytes()),
                e.code(),
                e.message().decode_in(&arena),
                e.data().map(|d| value(d.as_bytes()))
            ),
        },
        Err(e) => error(e),
    };
    match rpcwire::parse_response(input, &arena) {
        Ok(ResponseMessage::Single(r)) => one(Ok(r)),
        Ok(ResponseMessage::Batch(b)) => b.map(one).collect::<Vec<_>>().join(" | "),
        Err(e) => error(e),
    }
}

/// Responses take the compact reader too (`jsonrpc`, `id`, `result` in the
/// orders servers write), and hand over to the general reader at anything
/// else: every sequence of up to four member names (repeats, missing
/// members, an error object, an unknown member), with valid and invalid
/// values, reads the same compact (the fast path where it applies) and
/// with a tab after every `{` and `,` (the general reader throughout),
/// alone and in a batch.
#[test]
fn every_response_member_order_reads_alike() {
    let members = [
        ("jsonrpc", [r#""2.0""#, r#""1.0""#]),
        ("id", ["7", "null"]),
        ("result", [r#"{"a":[1,"x"]}"#, r#""0x1b4""#]),
        (
            "error",
            [
                r#"{"code":3,"message":"m","data":"0x1"}"#,
                r#"{"code":1.5,"message":"m"}"#,
            ],
        ),
        ("x", ["1", "[]"]),
    ];
    let mut checked = 0;
    for len in 0..=4u32 {
        for variant in 0..2 {
            for mut code in 0..members.len().pow(len) {
                let mut body = Vec::new();
                for k in 0..len {
                    let (name, values) = members[code % members.len()];
                    // The invalid value only in one position per message.
                    let value = values[(variant == 1 && k == len - 1) as usize];
                    body.push(format!("\"{name}\":{value}"));
                    code /= members.len();
                }
                let compact = format!("{{{}}}", body.join(","));
                let spaced = compact.replace('{', "{\t").replace(',', ",\t");
                assert_eq!(
                    response_summary(compact.as_bytes()),
                    response_summary(spaced.as_bytes()),
                    "{compact}"
                );
                let (compact, spaced) = (
                    format!("[{compact},{compact}]"),
                    format!("[{spaced},{spaced}]"),
                );
                assert_eq!(
                    response_summary(compact.as_bytes()),
                    response_summary(spaced.as_bytes()),
                    "{compact}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * (1 + 5 + 25 + 125 + 625));
    // Error objects of every form: the fast path takes `code`, `message`,
    // `data` in that order, anything else goes to the general reader.
    for object in [
        r#"{"code":3,"message":"execution reverted","data":"0x08c379a0"}"#,
        r#"{"code":-32000,"message":"a\"b\u00e8"}"#,
        r#"{"code": -32602, "message": "m", "data": {"x":[1,{"y":null}]}}"#,
        r#"{"code":0,"message":"","data":[]}"#,
        r#"{"code":-0,"message":"m"}"#,
        r#"{"code":01,"message":"m"}"#,
        r#"{"code":9223372036854775807,"message":"m"}"#,
        r#"{"code":9223372036854775808,"message":"m"}"#,
        r#"{"code":-9223372036854775808,"message":"m"}"#,
        r#"{"code":3e2,"message":"m"}"#,
        r#"{"code":"3","message":"m"}"#,
        r#"{"code":3,"message":7}"#,
        r#"{"code":3,"message":"m","data":1,"x":2}"#,
        r#"{"code":3,"message":"m","code":4}"#,
        r#"{"code":3 ,"message":"m"}"#,
        r#"{"message":"m","code":3}"#,
        r#"{"code":3}"#,
        r#"{"code":3,"message":"\ud800"}"#,
        r#"{"code":3,"message":"m","data":[[[[1]]]]}"#,
        r#"{}"#,
        "[]",
        "null",
        // Another byte in place of a member name's opening quote (found by
        // the fuzzer: the fast path matched the name's letters after it).
        r#"{xcode":3,"message":"m"}"#,
        r#"{"code":3,xmessage":"m"}"#,
        r#"{"code":3,"message":"m",xdata":1}"#,
    ] {
        for input in [
            format!(r#"{{"jsonrpc":"2.0","id":1,"error":{object}}}"#),
            format!(r#"{{"jsonrpc":"2.0","error":{object},"id":"a"}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"error":{object},"result":1}}"#),
            // After an entry whose error object the fast path read, one
            // the general reader finishes starts with nothing of it.
            format!(
                r#"[{{"jsonrpc":"2.0","id":1,"error":{object}}},{{"jsonrpc":"2.0","id":2,"result":1,"x":0}}]"#
            ),
            format!(
                r#"[{{"jsonrpc":"2.0","id":1,"error":{{"code":3,"message":"m"}}}},{{"jsonrpc":"2.0","id":2,"error":{object}}}]"#
            ),
        ] {
            let spaced = input.replace('{', "{\t").replace(',', ",\t");
            assert_eq!(
                response_summary(input.as_bytes()),
                response_summary(spaced.as_bytes()),
                "{input}"
            );
        }
    }
    // Depth limits hold on the fast path.
    let deep = br#"{"jsonrpc":"2.0","id":1,"error":{"code":3,"message":"m","data":[[1]]}}"#;
    let arena = Bump::new();
    assert!(
        Parser::new()
            .max_depth(4)
            .parse_response(deep, &arena)
            .is_ok()
    );
    assert_eq!(
        Parser::new()
            .max_depth(3)
            .parse_response(deep, &arena)
            .unwrap_err()
            .limit(),
        Some(3)
    );
    assert_eq!(
        Parser::new()
            .max_depth(1)
            .parse_response(deep, &arena)
            .unwrap_err()
            .limit(),
        Some(1)
    );
    // The forms the fast path takes, read right.
    for (input, want) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"result":"0x1b4"}"#,
            r#"1 ok "0x1b4""#,
        ),
        (r#"{"jsonrpc":"2.0","result":[],"id":"a"}"#, r#""a" ok []"#),
        (
            r#"{"jsonrpc": "2.0", "id": 2, "result": null}"#,
            "2 ok null",
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"result":"\u00e8"}"#,
            r#"3 ok "è""#,
        ),
    ] {
        assert_eq!(response_summary(input.as_bytes()), want);
    }
}

/// Compact requests take a fast path, anything else the general one; both
/// must read every variant the same way (checked against serde_json).
#[test]
fn fast_and_general_paths_agree() {
    let parser = Parser::new();
    let cases = [
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#,
        r#"{"jsonrpc": "2.0", "id": 1, "method": "m", "params": [1]}"#,
        r#"{"jsonrpc":  "2.0","id":1,"method":"m"}"#,
        r#"{ "jsonrpc":"2.0","id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m" }"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m"} "#,
        "{\"jsonrpc\":\"2.0\",\t\"id\":1,\"method\":\"m\"}",
        r#"{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"\u006dethod":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"\u006d"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","x":1}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1.5e3,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":01,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":-,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":"a\"b","method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"m","params":null}"#,
        r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1,]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,{"b":"c"}]}}"#,
        r#"{"jsonrpc":"2.0","method":"m"}"#,
        r#"{"id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m"}x"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc": "2.0", "method": "n"},{"jsonrpc":"2.0","id":2,"method":"m","method":"o"}]"#,
    ];
    for case in cases {
        oracle::check_agreement(&parser, case.as_bytes());
        // Every prefix, too: the fast path must never accept a truncation.
        for cut in 0..case.len() {
            oracle::check_agreement(&parser, &case.as_bytes()[..cut]);
        }
    }
    // Depth limits hold on the fast path.
    let shallow = Parser::new().max_depth(2);
    oracle::check_agreement(
        &shallow,
        br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#,
    );
    let e = shallow
        .parse(
            br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[[1]]}"#,
            &Bump::new(),
        )
        .unwrap_err();
    assert_eq!(e.limit(), Some(2));
    let e = Parser::new()
        .max_depth(1)
        .parse(br#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#, &Bump::new())
        .unwrap_err();
    assert_eq!(e.limit(), Some(1));
}

/// The error for a method with an unpaired surrogate escape points at the
/// escape, as every other error's offset points where the problem is: it
/// pointed at the text's first byte. Found by a review.
#[test]
fn an_unpaired_surrogate_in_a_method_is_reported_where_it_is() {
    for (input, at) in [
        (r#"{"jsonrpc":"2.0","id":1,"method":"ab\ud800"}"#, 36),
        (r#"{"jsonrpc":"2.0","id":1,"method":"\u0061\udc00x"}"#, 40),
        (
            r#"{"jsonrpc": "2.0", "method": "\ud800\u0041", "id": 1}"#,
            30,
        ),
    ] {
        assert_eq!(&input[at..at + 2], "\\u", "{input}");
        let arena = bumpalo::Bump::new();
        let message = rpcwire::Parser::new()
            .parse(input.as_bytes(), &arena)
            .unwrap();
        let entry = message.into_single().unwrap();
        let invalid = entry.invalid().expect("an invalid request");
        assert_eq!(invalid.error().offset(), at, "{input}");
        assert_eq!(invalid.id().as_bytes(), b"1");
    }
}

/// CI's emulated-CPU steps name the CPU they emulate in
/// `RPCWIRE_EXPECT_CPU`, so that a step whose emulator showed the tests
/// another CPU (a qemu whose `qemu64` model gained AVX2, a runner left
/// unset) fails rather than passing on the host's SIMD paths. Unset, as
/// in `cargo test`, there is nothing to check.
#[test]
fn the_cpu_is_the_one_ci_emulates() {
    let Ok(expected) = std::env::var("RPCWIRE_EXPECT_CPU") else {
        return;
    };
    match expected.as_str() {
        #[cfg(target_arch = "x86_64")]
        "x86_64-no-avx2" => assert!(
            !std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("sse2"),
            "expected an x86_64 with SSE2 and no AVX2"
        ),
        #[cfg(target_arch = "aarch64")]
        "aarch64-neon" => assert!(std::arch::is_aarch64_feature_detected!("neon")),
        other => panic!(
            "RPCWIRE_EXPECT_CPU={other}, but this is {} (x86_64-no-avx2 and aarch64-neon are known)",
            std::env::consts::ARCH
        ),
    }
}

/// `allow_null_ids(false)` (MCP: "the ID MUST NOT be `null`") makes a
/// request with `"id": null` invalid on every reading that takes requests,
/// with `id: null` and a reason; a notification, a response with a null
/// id (the answer to an unreadable message) and other ids read as ever.
#[test]
fn a_parser_refusing_null_ids_refuses_them_in_requests_only() {
    use rpcwire::message::{Incoming, Status};
    use rpcwire::response::ResponseMessage;
    let strict = Parser::new().allow_null_ids(false);
    assert!(Parser::new().null_ids_allowed() && !strict.null_ids_allowed());
    let arena = Bump::new();
    let refused = |entry: &Entry<'_>| match entry {
        Entry::Invalid(bad) => {
            assert!(bad.id().is_null());
            assert_eq!(bad.error().code(), INVALID_REQUEST);
            let mut data = Vec::new();
            bad.error().write_data(&mut data);
            let data = String::from_utf8(data).unwrap();
            assert!(data.contains("must not be null"), "{data}");
            true
        }
        _ => false,
    };
    for input in [
        &br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#[..],
        br#"{"id" : null, "jsonrpc":"2.0","method":"ping","params":[]}"#,
        br#"{"jsonrpc":"2.0","method":"ping","params":{},"id":null}"#,
    ] {
        let text = String::from_utf8_lossy(input);
        let entry = strict.parse(input, &arena).unwrap().into_single().unwrap();
        assert!(refused(&entry), "{text}: {entry:?}");
        let default = Parser::new().parse(input, &arena).unwrap().into_single();
        assert!(default.unwrap().request().is_some(), "{text}");
        match strict.parse_incoming(input, &arena).unwrap() {
            Message::Single(Incoming::Invalid(i)) => assert!(i.id().is_null(), "{text}"),
            other => panic!("{text}: {other:?}"),
        }
        match strict.parse_prefix(input, &arena).unwrap() {
            Status::Complete((Message::Single(Incoming::Invalid(_)), n)) => {
                assert_eq!(n, input.len())
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    // In a batch, only that entry.
    let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":null,"method":"b"},{"jsonrpc":"2.0","method":"c"}]"#;
    let Message::Batch(entries) = strict.parse(batch, &arena).unwrap() else {
        panic!("a batch")
    };
    let entries: Vec<_> = entries.collect();
    assert_eq!(entries[0].request().unwrap().method(), "a");
    assert!(refused(&entries[1]));
    assert!(entries[2].request().unwrap().is_notification());
    // Responses with a null id stay responses.
    let answer = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;
    assert!(matches!(
        strict.parse_response(answer, &arena),
        Ok(ResponseMessage::Single(_))
    ));
    assert!(matches!(
        strict.parse_incoming(answer, &arena),
        Ok(Message::Single(Incoming::Response(_)))
    ));
    // A string "null" is an id like any other.
    let named = br#"{"jsonrpc":"2.0","id":"null","method":"ping"}"#;
    let entry = strict.parse(named, &arena).unwrap().into_single().unwrap();
    assert_eq!(
        entry.request().unwrap().id().unwrap().as_bytes(),
        b"\"null\""
    );
}
