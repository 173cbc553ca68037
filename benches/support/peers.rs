//! What users run today, doing the same job as `rpcwire::parse`: read the
//! envelope of every request in a message, keep `params` raw, and validate the
//! whole input. Each peer returns a checksum of what it read (method length,
//! id bytes, params bytes) so the benchmark can check that every peer really
//! did the work, and so nothing is optimised away.
#![allow(dead_code)]

use serde::Deserialize;
use std::borrow::Cow;

/// The jsonrpsee-types shape: `Cow<str>` method, raw id and params.
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
/// `Vec<Request>` in one pass (gives up per-element error replies).
pub fn serde_json_one_pass(input: &[u8]) -> usize {
    if first_byte(input) == b'[' {
        let requests: Vec<SerdeRequest> = serde_json::from_slice(input).unwrap();
        requests.iter().map(serde_digest).sum()
    } else {
        serde_digest(&serde_json::from_slice::<SerdeRequest>(input).unwrap())
    }
}

/// The same envelope read by sonic-rs with `LazyValue` for id and params.
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

/// simd-json's borrowed DOM. It parses in place, so the input is copied into a
/// reused buffer first, and its internal buffers are reused across calls.
#[derive(Default)]
pub struct SimdJson {
    copy: Vec<u8>,
    buffers: simd_json::Buffers,
}

impl SimdJson {
    pub fn parse(&mut self, input: &[u8]) -> usize {
        use simd_json::prelude::*;
        self.copy.clear();
        self.copy.extend_from_slice(input);
        let value =
            simd_json::to_borrowed_value_with_buffers(&mut self.copy, &mut self.buffers).unwrap();
        let digest = |v: &simd_json::BorrowedValue| -> usize {
            assert_eq!(v.get_str("jsonrpc"), Some("2.0"));
            let method = v.get_str("method").unwrap().len();
            // A DOM has no raw bytes to hand over: count what it holds instead.
            let id = v.get("id").map_or(0, |_| 1);
            let params = match v.get("params") {
                Some(p) => p.as_array().map_or(1, |a| a.len() + 1),
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
