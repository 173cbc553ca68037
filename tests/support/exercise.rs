//! Drives every public reading path of the parser over one input; used by the
//! `parse` fuzz target and by the corpus replay in `cargo test`. Panics on any
//! broken invariant.
#![allow(dead_code)]

use rpcwire::json::RawJson as RawValue;
use rpcwire::message::Message;
use rpcwire::request::{Entry, Params};
use rpcwire::response::ResponseMessage;

fn valid_json(bytes: &[u8]) {
    assert!(
        serde_json::from_slice::<&serde_json::value::RawValue>(bytes).is_ok(),
        "a view is not valid JSON: {:?}",
        String::from_utf8_lossy(bytes)
    );
}

fn value(v: RawValue<'_>, arena: &bumpalo::Bump, depth: usize) {
    valid_json(v.as_bytes());
    assert_eq!(v.as_json().as_bytes(), v.as_bytes());
    let _ = (v.kind(), v.as_u64(), v.as_i64(), v.as_bool(), v.is_null());
    if let Some(s) = v.as_json_str() {
        let decoded = s.decode_in(arena);
        let serde: Option<String> = serde_json::from_slice(v.as_bytes()).ok();
        assert_eq!(
            decoded.map(str::to_owned),
            serde,
            "string decoding differs from serde_json"
        );
        if let Some(d) = decoded {
            assert!(s.eq_str(d));
        }
    }
    if let Some(p) = v.as_params()
        && depth < 8
    {
        params(p, arena, depth + 1);
    }
}

fn params(p: Params<'_>, arena: &bumpalo::Bump, depth: usize) {
    valid_json(p.as_bytes());
    // serde_json's `Value` cannot hold a string with an unpaired surrogate
    // escape; then only rpcwire's own views are exercised.
    let serde: Option<serde_json::Value> = serde_json::from_slice(p.as_bytes()).ok();
    if p.is_array() {
        let items: Vec<RawValue> = p.iter().collect();
        if let Some(serde) = &serde {
            assert_eq!(items.len(), serde.as_array().unwrap().len());
        }
        assert_eq!(p.len(), items.len());
        for (i, v) in items.iter().enumerate() {
            assert_eq!(p.nth(i), Some(*v));
            value(*v, arena, depth);
        }
    } else {
        let entries: Vec<_> = p.entries().collect();
        for (k, v) in &entries {
            value(*v, arena, depth);
            if let Some(name) = k.decode_in(arena) {
                // serde_json keeps the last of repeated names, rpcwire's `get`
                // the first: both are some member with that name.
                if let Some(serde) = &serde {
                    assert!(serde.as_object().unwrap().contains_key(name));
                }
                assert!(p.get(name).is_some());
            }
        }
        if let Some(serde) = &serde {
            assert!(entries.len() >= serde.as_object().unwrap().len());
        }
    }
    let counted = if p.is_array() {
        p.iter().count()
    } else {
        p.entries().count()
    };
    assert_eq!(p.is_empty(), counted == 0);
}

fn entry(e: Entry<'_>, input: &[u8], arena: &bumpalo::Bump) {
    let inside = |b: &[u8]| {
        let (start, end) = (
            input.as_ptr() as usize,
            input.as_ptr() as usize + input.len(),
        );
        let p = b.as_ptr() as usize;
        assert!(
            p >= start && p + b.len() <= end,
            "a view points outside the input"
        );
    };
    match e {
        Entry::Request(r) => {
            let _ = r.method();
            if let Some(id) = r.id() {
                inside(id.as_bytes());
                valid_json(id.as_bytes());
            }
            if let Some(p) = r.params() {
                inside(p.as_bytes());
                params(p, arena, 0);
            }
        }
        Entry::Invalid(i) => {
            valid_json(i.id().as_bytes());
            assert_eq!(i.error().code(), rpcwire::codes::INVALID_REQUEST);
            let _ = i.error().to_string();
        }
    }
}

pub fn exercise(input: &[u8]) {
    let arena = bumpalo::Bump::new();
    for parser in [
        rpcwire::Parser::new(),
        rpcwire::Parser::new()
            .max_depth(3)
            .max_batch_len(2)
            .max_id_len(4),
    ] {
        incoming(&parser, input, &arena);
        match parser.parse(input, &arena) {
            Ok(Message::Single(e)) => entry(e, input, &arena),
            Ok(Message::Batch(b)) => {
                assert!(b.len() <= parser.batch_len_limit() as usize);
                for e in b {
                    entry(e, input, &arena);
                }
            }
            Err(e) => {
                assert!(e.offset() <= input.len());
                let mut data = Vec::new();
                e.write_data(&mut data);
                valid_json(&data);
                let _ = (e.to_string(), e.code(), e.message(), e.category());
            }
        }
        match parser.parse_response(input, &arena) {
            Ok(ResponseMessage::Single(r)) => response(Ok(r)),
            Ok(ResponseMessage::Batch(b)) => b.for_each(response),
            Err(e) => assert!(e.offset() <= input.len()),
        }
        responses_agree(&parser, input, &arena);
    }
    null_ids_refused_alike(input, &arena);
}

/// A parser refusing null ids reads `input` as the default one does, but
/// for requests with `"id": null`, which it reads as invalid with id null.
fn null_ids_refused_alike(input: &[u8], arena: &bumpalo::Bump) {
    let strict = rpcwire::Parser::new().allow_null_ids(false);
    let reading = |e: Entry<'_>| match e {
        Entry::Request(r) if r.id().is_some_and(|id| id.is_null()) => "refused".to_owned(),
        Entry::Request(r) => format!("{:?} {:?} {:?}", r.id(), r.method(), r.params()),
        Entry::Invalid(i) => format!("invalid {:?} {}", i.id(), i.error()),
    };
    let strict_reading = |e: Entry<'_>| match e {
        Entry::Invalid(i) if i.error().to_string().contains("must not be null") => {
            assert!(i.id().is_null());
            "refused".to_owned()
        }
        other => reading(other),
    };
    let all = |m: Result<Message<'_, Entry<'_>>, rpcwire::Error>,
               one: &dyn Fn(Entry<'_>) -> String| {
        match m {
            Ok(Message::Single(e)) => vec![one(e)],
            Ok(Message::Batch(b)) => b.map(one).collect(),
            Err(e) => vec![e.to_string()],
        }
    };
    assert_eq!(
        all(strict.parse(input, arena), &strict_reading),
        all(rpcwire::Parser::new().parse(input, arena), &reading),
    );
}

/// `json` with a tab after every `{` and `,` outside strings.
fn tab_after_openers(json: &[u8]) -> Vec<u8> {
    let (mut out, mut in_string, mut escaped) = (Vec::with_capacity(json.len() * 2), false, false);
    for &b in json {
        out.push(b);
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b'{' || b == b',' {
            out.push(b'\t');
        }
    }
    out
}

/// What a response reading says, with every JSON view spaced as
/// [`tab_after_openers`] spaces it, and errors without their offsets.
fn response_reading(r: Result<ResponseMessage<'_>, rpcwire::Error>, spaced: bool) -> String {
    let view = |b: &[u8]| {
        let b = if spaced {
            b.to_vec()
        } else {
            tab_after_openers(b)
        };
        String::from_utf8_lossy(&b).into_owned()
    };
    let error = |e: rpcwire::Error| {
        let text = e.to_string();
        format!(
            "error {} {}",
            e.code(),
            text.rsplit_once(" at byte ").unwrap().0
        )
    };
    let one = |r: Result<rpcwire::response::Response<'_>, rpcwire::Error>| match r {
        Ok(r) => {
            let outcome = match r.result() {
                Ok(v) => view(v.as_bytes()),
                Err(e) => format!(
                    "{} {:?} {:?}",
                    e.code(),
                    e.message().as_bytes(),
                    e.data().map(|d| view(d.as_bytes()))
                ),
            };
            format!("{} {outcome}", view(r.id().as_bytes()))
        }
        Err(e) => error(e),
    };
    match r {
        Ok(ResponseMessage::Single(r)) => one(Ok(r)),
        Ok(ResponseMessage::Batch(b)) => b.map(one).collect::<Vec<_>>().join(" | "),
        Err(e) => error(e),
    }
}

/// The compact reader of responses decides nothing the general reader would
/// decide differently: `input` reads as it does with a tab after every `{`
/// and `,` (which the compact reader leaves to the general one at once).
fn responses_agree(parser: &rpcwire::Parser, input: &[u8], arena: &bumpalo::Bump) {
    let spaced = tab_after_openers(input);
    if spaced.len() > parser.message_len_limit() {
        return;
    }
    assert_eq!(
        response_reading(parser.parse_response(input, arena), false),
        response_reading(parser.parse_response(&spaced, arena), true),
        "{:?}",
        String::from_utf8_lossy(input)
    );
}

fn response(r: Result<rpcwire::response::Response<'_>, rpcwire::Error>) {
    let Ok(r) = r else { return };
    valid_json(r.id().as_bytes());
    match r.result() {
        Ok(v) => valid_json(v.as_bytes()),
        Err(e) => {
            let _ = (e.code(), e.message().decode());
            // The whole object: one valid object, holding its members.
            let object = e.as_bytes();
            valid_json(object);
            assert!(object.starts_with(b"{") && object.ends_with(b"}"));
            let within = |s: &[u8]| {
                let range = object.as_ptr_range();
                range.start <= s.as_ptr() && s.as_ptr_range().end <= range.end
            };
            assert!(within(e.message().as_bytes()));
            if let Some(d) = e.data() {
                valid_json(d.as_bytes());
                assert!(within(d.as_bytes()));
            }
        }
    }
}

/// The two-way reading and the prefix reading agree with the request
/// reading: the same message, the same entries; a complete message is
/// complete at its end, and every prefix of it is partial.
fn incoming(parser: &rpcwire::Parser, input: &[u8], arena: &bumpalo::Bump) {
    use rpcwire::Status;
    use rpcwire::message::Incoming;
    let two_way = parser.parse_incoming(input, arena);
    let one_way = parser.parse(input, arena);
    assert_eq!(two_way.is_ok(), one_way.is_ok());
    let Ok(message) = two_way else {
        // Invalid as a whole: no prefix of it reads as complete with the
        // same length either.
        if let Ok(Status::Complete((_, len))) = parser.parse_prefix(input, arena) {
            assert!(len < input.len(), "complete yet invalid");
        }
        return;
    };
    let items: Vec<Incoming> = match message {
        Message::Single(i) => vec![i],
        Message::Batch(b) => b.collect(),
    };
    for item in &items {
        match item {
            Incoming::Request(r) => valid_json(r.id().map_or(&b"null"[..], |i| i.as_bytes())),
            Incoming::Response(r) => response(Ok(*r)),
            Incoming::Invalid(i) => valid_json(i.id().as_bytes()),
            Incoming::InvalidResponse(r) => {
                if let Some(id) = r.id() {
                    valid_json(id.as_bytes())
                }
            }
        }
        if let Some(Entry::Request(r)) = item.as_entry()
            && let Some(id) = r.id()
        {
            assert!(id.as_bytes().len() <= parser.id_len_limit() as usize);
        }
    }
    let trimmed = input.len()
        - input
            .iter()
            .rev()
            .take_while(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
            .count();
    match parser.parse_prefix(input, arena) {
        Ok(Status::Complete((_, len))) => assert_eq!(len, trimmed),
        // A valid message that is not an object or array has no end a
        // framer could find: refused.
        other => assert!(
            !matches!(
                input.iter().find(|b| !b.is_ascii_whitespace()),
                Some(b'{' | b'[')
            ),
            "{other:?}"
        ),
    }
    if input.len() <= 300 {
        for cut in 0..trimmed {
            let head = &input[..cut];
            if head.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match parser.parse_prefix(head, arena) {
                Ok(Status::Partial) => {}
                Err(e)
                    if !matches!(
                        head.iter().find(|b| !b.is_ascii_whitespace()),
                        Some(b'{' | b'[')
                    ) =>
                {
                    let _ = e;
                }
                other => panic!("prefix {cut}: {other:?}"),
            }
        }
    }
}
