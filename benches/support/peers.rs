//! What users run today, doing the same job as `rpcwire::parse`: read the
//! envelope of every request in a message, keep `params` raw, and validate the
//! whole input. Each peer is written the fastest way its users would write it
//! for this job, and returns a digest of what it read (method length, id
//! bytes, params bytes; a DOM, which has no raw bytes, counts what it holds)
//! that the benchmark compares with the expected one for every message.
//!
//! Left out on purpose: sonic-rs `get` / `get_many` stop reading once the
//! members asked for are found, so they neither validate the rest of the
//! message nor see a duplicate member or trailing bytes, and `get_many`
//! allocates its result; they do a smaller job than a server must.
#![allow(dead_code)]

use serde::Deserialize;
use std::borrow::Cow;

/// What serde_json reads a request's envelope into (the jsonrpsee-types
/// shape): `Cow<str>` method, raw id and params.
#[derive(Deserialize)]
pub struct SerdeRequest<'a> {
    #[serde(borrow)]
    pub jsonrpc: Cow<'a, str>,
    #[serde(borrow, default)]
    pub id: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    pub method: Cow<'a, str>,
    #[serde(borrow, default)]
    pub params: Option<&'a serde_json::value::RawValue>,
}

fn first_byte(input: &[u8]) -> u8 {
    input
        .iter()
        .copied()
        .find(|b| !b" \t\r\n".contains(b))
        .unwrap_or(0)
}

fn serde_digest(r: &SerdeRequest<'_>) -> usize {
    assert_eq!(r.jsonrpc, "2.0");
    r.method.len() + r.id.map_or(0, |i| i.get().len()) + r.params.map_or(0, |p| p.get().len())
}

/// serde_json with `&RawValue` as jsonrpsee reads a message: a batch is first
/// split into raw elements, then each element is read as a request, so one bad
/// element is answered on its own.
pub fn serde_json_raw(input: &[u8]) -> usize {
    if first_byte(input) == b'[' {
        let elements: Vec<&serde_json::value::RawValue> = serde_json::from_slice(input).unwrap();
        elements
            .iter()
            .map(|e| serde_digest(&serde_json::from_str::<SerdeRequest>(e.get()).unwrap()))
            .sum()
    } else {
        serde_digest(&serde_json::from_slice::<SerdeRequest>(input).unwrap())
    }
}

/// serde_json in its most favourable shape: a batch straight into
/// `Vec<Request>` in one pass (a server falls back to the two-step shape
/// when this fails, to answer a bad entry on its own).
pub fn serde_json_one_pass(input: &[u8]) -> usize {
    if first_byte(input) == b'[' {
        let requests: Vec<SerdeRequest> = serde_json::from_slice(input).unwrap();
        requests.iter().map(serde_digest).sum()
    } else {
        serde_digest(&serde_json::from_slice::<SerdeRequest>(input).unwrap())
    }
}

/// The same envelope read by sonic-rs: `from_slice` into a struct with
/// `LazyValue` id and params (sonic-rs's borrowed raw value, validated as it
/// is skipped), the way its documentation reads a request.
#[derive(Deserialize)]
pub struct SonicRequest<'a> {
    #[serde(borrow)]
    pub jsonrpc: Cow<'a, str>,
    #[serde(borrow, default)]
    pub id: Option<sonic_rs::LazyValue<'a>>,
    #[serde(borrow)]
    pub method: Cow<'a, str>,
    #[serde(borrow, default)]
    pub params: Option<sonic_rs::LazyValue<'a>>,
}

fn sonic_digest(r: &SonicRequest<'_>) -> usize {
    assert_eq!(r.jsonrpc, "2.0");
    r.method.len()
        + r.id.as_ref().map_or(0, |i| i.as_raw_str().len())
        + r.params.as_ref().map_or(0, |p| p.as_raw_str().len())
}

/// sonic-rs, jsonrpsee's two-step batch shape.
pub fn sonic_rs_lazy(input: &[u8]) -> usize {
    if first_byte(input) == b'[' {
        let elements: Vec<sonic_rs::LazyValue> = sonic_rs::from_slice(input).unwrap();
        elements
            .iter()
            .map(|e| sonic_digest(&sonic_rs::from_str::<SonicRequest>(e.as_raw_str()).unwrap()))
            .sum()
    } else {
        sonic_digest(&sonic_rs::from_slice::<SonicRequest>(input).unwrap())
    }
}

/// sonic-rs in one pass: a batch straight into `Vec<Request>`.
pub fn sonic_rs_one_pass(input: &[u8]) -> usize {
    if first_byte(input) == b'[' {
        let requests: Vec<SonicRequest> = sonic_rs::from_slice(input).unwrap();
        requests.iter().map(sonic_digest).sum()
    } else {
        sonic_digest(&sonic_rs::from_slice::<SonicRequest>(input).unwrap())
    }
}

/// The digest a DOM peer can compute: method length, 1 for an id, and for
/// params the number of elements or members plus one.
pub fn dom_digest(v: &serde_json::Value) -> usize {
    let one = |r: &serde_json::Value| {
        r["method"].as_str().unwrap().len()
            + usize::from(r.get("id").is_some())
            + match r.get("params") {
                Some(serde_json::Value::Array(a)) => a.len() + 1,
                Some(serde_json::Value::Object(o)) => o.len() + 1,
                _ => 0,
            }
    };
    match v {
        serde_json::Value::Array(entries) => entries.iter().map(one).sum(),
        single => one(single),
    }
}

/// The digest rpcwire and the raw-value peers compute, from serde_json.
pub fn raw_digest(input: &[u8]) -> usize {
    serde_json_raw(input)
}

/// rpcwire's side of the same digest: method length, id and params bytes
/// of every request in the message.
pub fn rpcwire_digest(input: &[u8], arena: &bumpalo::Bump) -> usize {
    let digest = |e: rpcwire::request::Entry| {
        let r = e.request().expect("corpus requests are valid");
        r.method().len()
            + r.id().map_or(0, |i| i.as_bytes().len())
            + r.params().map_or(0, |p| p.as_bytes().len())
    };
    match rpcwire::parse(input, arena).expect("corpus messages are valid") {
        rpcwire::message::Message::Single(e) => digest(e),
        rpcwire::message::Message::Batch(b) => b.map(digest).sum(),
    }
}

/// simd-json, the fastest way it offers for this job: the input copied once
/// into a reused, padded buffer (it parses in place), its tape filled
/// in place (`fill_tape_padded`, no second copy) with its buffers and tape
/// reused across calls, and the envelope read from the tape.
pub struct SimdJsonTape {
    copy: Vec<u8>,
    buffers: simd_json::Buffers,
    tape: Option<simd_json::Tape<'static>>,
}

impl Default for SimdJsonTape {
    fn default() -> Self {
        SimdJsonTape {
            copy: Vec::new(),
            buffers: simd_json::Buffers::default(),
            tape: Some(simd_json::Tape::null()),
        }
    }
}

impl SimdJsonTape {
    /// Fills the tape from `input` and hands its root to `read`.
    fn with_tape(
        &mut self,
        input: &[u8],
        read: impl FnOnce(simd_json::tape::Value) -> usize,
    ) -> usize {
        self.copy.clear();
        self.copy.extend_from_slice(input);
        self.copy
            .resize(input.len() + simd_json::INPUT_PADDING, b' ');
        let mut tape = self.tape.take().unwrap().reset();
        simd_json::fill_tape_padded(&mut self.copy, input.len(), &mut self.buffers, &mut tape)
            .unwrap();
        let digest = read(tape.as_value());
        self.tape = Some(tape.reset());
        digest
    }

    pub fn parse(&mut self, input: &[u8]) -> usize {
        use simd_json::prelude::*;
        let digest = |v: simd_json::tape::Value| -> usize {
            let o = v.as_object().unwrap();
            assert_eq!(o.get("jsonrpc").unwrap().as_str(), Some("2.0"));
            let method = o.get("method").unwrap().as_str().unwrap().len();
            let id = usize::from(o.get("id").is_some());
            let params = match o.get("params") {
                Some(p) => match (p.as_array(), p.as_object()) {
                    (Some(a), _) => a.len() + 1,
                    (_, Some(o)) => o.len() + 1,
                    _ => 0,
                },
                None => 0,
            };
            method + id + params
        };
        self.with_tape(input, |root| match root.as_array() {
            Some(entries) => entries.iter().map(digest).sum(),
            None => digest(root),
        })
    }
}

/// simd-json's borrowed DOM (`to_borrowed_value_with_buffers`), input copied
/// into a reused buffer, buffers reused.
#[derive(Default)]
pub struct SimdJsonDom {
    copy: Vec<u8>,
    buffers: simd_json::Buffers,
}

impl SimdJsonDom {
    pub fn parse(&mut self, input: &[u8]) -> usize {
        use simd_json::prelude::*;
        self.copy.clear();
        self.copy.extend_from_slice(input);
        let value =
            simd_json::to_borrowed_value_with_buffers(&mut self.copy, &mut self.buffers).unwrap();
        let digest = |v: &simd_json::BorrowedValue| -> usize {
            assert_eq!(v.get_str("jsonrpc"), Some("2.0"));
            let method = v.get_str("method").unwrap().len();
            let id = usize::from(v.get("id").is_some());
            let params = match v.get("params") {
                Some(p) => match (p.as_array(), p.as_object()) {
                    (Some(a), _) => a.len() + 1,
                    (_, Some(o)) => o.len() + 1,
                    _ => 0,
                },
                None => 0,
            };
            method + id + params
        };
        match value.as_array() {
            Some(elements) => elements.iter().map(digest).sum(),
            None => digest(&value),
        }
    }
}

/// A response as serde_json reads it (the jsonrpsee-types and alloy shape):
/// raw id and result, the error object's members.
#[derive(Deserialize)]
pub struct SerdeResponse<'a> {
    #[serde(borrow)]
    pub jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    pub id: &'a serde_json::value::RawValue,
    #[serde(borrow, default)]
    pub result: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    pub error: Option<SerdeErrorObject<'a>>,
}

#[derive(Deserialize)]
pub struct SerdeErrorObject<'a> {
    pub code: i64,
    #[serde(borrow)]
    pub message: Cow<'a, str>,
    #[serde(borrow, default)]
    pub data: Option<&'a serde_json::value::RawValue>,
}

/// The digest of a response: id bytes, and the result's bytes or the
/// error's code, message length and data bytes.
pub fn serde_json_response(input: &[u8]) -> usize {
    let r: SerdeResponse = serde_json::from_slice(input).unwrap();
    assert_eq!(r.jsonrpc, "2.0");
    let outcome = match (r.result, r.error) {
        (Some(result), None) => result.get().len(),
        (None, Some(e)) => {
            e.code.unsigned_abs() as usize + e.message.len() + e.data.map_or(0, |d| d.get().len())
        }
        _ => panic!("a response has a result or an error"),
    };
    r.id.get().len() + outcome
}

/// sonic-rs's side of [`serde_json_response`]: the same shape, with
/// `LazyValue`s for the raw members (as for requests).
#[derive(Deserialize)]
pub struct SonicResponse<'a> {
    #[serde(borrow)]
    pub jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    pub id: sonic_rs::LazyValue<'a>,
    #[serde(borrow, default)]
    pub result: Option<sonic_rs::LazyValue<'a>>,
    #[serde(borrow, default)]
    pub error: Option<SonicErrorObject<'a>>,
}

#[derive(Deserialize)]
pub struct SonicErrorObject<'a> {
    pub code: i64,
    #[serde(borrow)]
    pub message: Cow<'a, str>,
    #[serde(borrow, default)]
    pub data: Option<sonic_rs::LazyValue<'a>>,
}

/// [`serde_json_response`]'s digest, from sonic-rs.
pub fn sonic_rs_response(input: &[u8]) -> usize {
    let r: SonicResponse = sonic_rs::from_slice(input).unwrap();
    assert_eq!(r.jsonrpc, "2.0");
    let outcome = match (r.result, r.error) {
        (Some(result), None) => result.as_raw_str().len(),
        (None, Some(e)) => {
            e.code.unsigned_abs() as usize
                + e.message.len()
                + e.data.map_or(0, |d| d.as_raw_str().len())
        }
        _ => panic!("a response has a result or an error"),
    };
    r.id.as_raw_str().len() + outcome
}

/// rpcwire's side of [`serde_json_response`]'s digest.
pub fn rpcwire_response_digest(input: &[u8], arena: &bumpalo::Bump) -> usize {
    let rpcwire::response::ResponseMessage::Single(r) =
        rpcwire::parse_response(input, arena).expect("corpus responses are valid")
    else {
        panic!("a single response")
    };
    let outcome = match r.result() {
        Ok(result) => result.as_bytes().len(),
        Err(e) => {
            e.code().unsigned_abs() as usize
                + e.message().as_bytes().len()
                + e.data().map_or(0, |d| d.as_bytes().len())
        }
    };
    r.id().as_bytes().len() + outcome
}

/// What a DOM holds of a response: 1 for the id, and for the result the
/// number of elements or members plus one (a string: its length), or the
/// error's code.
pub fn response_dom_digest(v: &serde_json::Value) -> usize {
    let result = match &v["result"] {
        serde_json::Value::Array(a) => a.len() + 1,
        serde_json::Value::Object(o) => o.len() + 1,
        serde_json::Value::String(s) => s.len(),
        _ => 0,
    };
    let error = v["error"]["code"]
        .as_i64()
        .map_or(0, |c| c.unsigned_abs() as usize);
    usize::from(v.get("id").is_some()) + result + error
}

impl SimdJsonTape {
    /// [`response_dom_digest`] from simd-json's tape.
    pub fn parse_response(&mut self, input: &[u8]) -> usize {
        use simd_json::prelude::*;
        self.with_tape(input, |root| {
            let o = root.as_object().unwrap();
            assert_eq!(o.get("jsonrpc").unwrap().as_str(), Some("2.0"));
            let result = match o.get("result") {
                Some(r) => match (r.as_array(), r.as_object(), r.as_str()) {
                    (Some(a), _, _) => a.len() + 1,
                    (_, Some(o), _) => o.len() + 1,
                    (_, _, Some(s)) => s.len(),
                    _ => 0,
                },
                None => 0,
            };
            let error = o
                .get("error")
                .and_then(|e| e.as_object().and_then(|e| e.get("code")))
                .and_then(|c| c.as_i64())
                .map_or(0, |c| c.unsigned_abs() as usize);
            usize::from(o.get("id").is_some()) + result + error
        })
    }
}
