//! What serde_json reads from a message, classified by the rules of
//! DESIGN.md: the reference rpcwire's parser is checked against, in the
//! property tests, the fuzz corpus replay and the differential fuzz target.
#![allow(dead_code)]

use serde::Deserialize;
use serde_json::value::RawValue;

/// One classified entry, as owned bytes so that both sides compare equal.
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum EntryView {
    Request {
        method: String,
        id: Option<Vec<u8>>,
        params: Option<Vec<u8>>,
    },
    Invalid {
        id: Vec<u8>,
    },
}

/// How a whole message is classified.
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum Classified {
    /// Not one valid JSON value: -32700.
    ParseError,
    /// Valid JSON that cannot be answered entry by entry (not an object or
    /// array, or `[]`): one -32600 with `id: null`.
    WholeInvalid,
    Single(EntryView),
    Batch(Vec<EntryView>),
}

fn raw_always<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The envelope members, each kept raw (`null` included, unlike `Option`).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default, deserialize_with = "raw_always")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_always")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_always")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_always")]
    params: Option<&'a RawValue>,
}

const NULL: &[u8] = b"null";

pub fn classify_entry(raw: &str, max_id_len: usize) -> EntryView {
    if !raw.starts_with('{') {
        return EntryView::Invalid { id: NULL.to_vec() };
    }
    // serde's derive rejects a repeated field: then no id can be trusted.
    let Ok(env) = serde_json::from_str::<Envelope>(raw) else {
        return EntryView::Invalid { id: NULL.to_vec() };
    };
    let id = env.id.map(|r| r.get().as_bytes().to_vec());
    if let Some(id) = &id
        && (matches!(id[0], b'{' | b'[' | b't' | b'f') || id.len() > max_id_len)
    {
        return EntryView::Invalid { id: NULL.to_vec() };
    }
    let invalid = || EntryView::Invalid {
        id: id.clone().unwrap_or_else(|| NULL.to_vec()),
    };
    let version_ok = env
        .jsonrpc
        .and_then(|r| serde_json::from_str::<String>(r.get()).ok())
        .is_some_and(|v| v == "2.0");
    if !version_ok {
        return invalid();
    }
    let Some(method) = env
        .method
        .and_then(|r| serde_json::from_str::<String>(r.get()).ok())
    else {
        return invalid();
    };
    let params = match env.params.map(|r| r.get()) {
        None | Some("null") => None,
        Some(p) if p.starts_with('[') || p.starts_with('{') => Some(p.as_bytes().to_vec()),
        Some(_) => return invalid(),
    };
    EntryView::Request { method, id, params }
}

/// The classification with the default id length limit.
pub fn classify(input: &[u8]) -> Classified {
    classify_with(input, rpcwire::Parser::DEFAULT_MAX_ID_LEN as usize)
}

pub fn classify_with(input: &[u8], max_id_len: usize) -> Classified {
    let Ok(raw) = serde_json::from_slice::<&RawValue>(input) else {
        return Classified::ParseError;
    };
    let text = raw.get();
    if text.starts_with('{') {
        Classified::Single(classify_entry(text, max_id_len))
    } else if text.starts_with('[') {
        let elements: Vec<&RawValue> = serde_json::from_str(text).expect("an array of values");
        if elements.is_empty() {
            return Classified::WholeInvalid;
        }
        Classified::Batch(
            elements
                .iter()
                .map(|e| classify_entry(e.get(), max_id_len))
                .collect(),
        )
    } else {
        Classified::WholeInvalid
    }
}

/// rpcwire's reading of the same message, in the same shape. `Err` carries
/// rpcwire's error when it is a limit error (depth, batch length), which the
/// oracle knows nothing about.
pub fn rpcwire_view(parser: &rpcwire::Parser, input: &[u8]) -> Result<Classified, rpcwire::Error> {
    let arena = bumpalo::Bump::new();
    let view = |e: rpcwire::request::Entry| match e {
        rpcwire::request::Entry::Request(r) => EntryView::Request {
            method: r.method().to_string(),
            id: r.id().map(|i| i.as_bytes().to_vec()),
            params: r.params().map(|p| p.as_bytes().to_vec()),
        },
        rpcwire::request::Entry::Invalid(i) => EntryView::Invalid {
            id: i.id().as_bytes().to_vec(),
        },
    };
    match parser.parse(input, &arena) {
        Ok(rpcwire::message::Message::Single(e)) => Ok(Classified::Single(view(e))),
        Ok(rpcwire::message::Message::Batch(b)) => Ok(Classified::Batch(b.map(view).collect())),
        Err(e) if e.category() == rpcwire::Category::Limit => Err(e),
        Err(e) if e.code() == rpcwire::codes::PARSE_ERROR => Ok(Classified::ParseError),
        Err(_) => Ok(Classified::WholeInvalid),
    }
}

/// Checks rpcwire against serde_json on `input`; panics with both readings
/// on disagreement. Limit errors are accepted when the input really is
/// beyond the limit.
pub fn check_agreement(parser: &rpcwire::Parser, input: &[u8]) {
    let want = classify_with(input, parser.id_len_limit() as usize);
    match rpcwire_view(parser, input) {
        Ok(got) => assert_eq!(
            got,
            want,
            "rpcwire and serde_json disagree on {:?}",
            String::from_utf8_lossy(input)
        ),
        Err(limit) => {
            // Too deep: the nesting up to the error really is beyond the
            // limit. Invalid JSON further on is then not reached; both are
            // -32700.
            let prefix = &input[..(limit.offset() + 1).min(input.len())];
            let too_deep = limit.code() == rpcwire::codes::PARSE_ERROR
                && nesting_depth(prefix) > parser.depth_limit() as usize;
            // Too long: only valid JSON is counted (invalid JSON wins).
            let too_long = matches!(&want, Classified::Batch(b) if b.len() > parser.batch_len_limit() as usize);
            assert!(
                too_deep || too_long,
                "limit error {limit} within limits: {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }
}

/// The deepest nesting of arrays and objects in valid JSON.
pub fn nesting_depth(input: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in input {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
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
