//! The `eth_hex` fuzz target's check, also run by `tests/fuzz_corpus.rs`:
//! any bytes, written as a DATA string in a request's params, decode through
//! the `eth` layer's readers exactly as a digit-by-digit reference decodes
//! them (addresses, hashes, and data of any length into the arena, as the
//! last element or before another), and a string that is not DATA is
//! refused, never decoded. The same string, with and without its `0x`,
//! read as a block id reads alike through the fused reader and the
//! general one.

use rpcwire::eth::EthParams;
use rpcwire::request::Params;

/// The bytes of `digits` as hex, or `None` if any is not a hex digit or the
/// count is odd.
fn reference(digits: &[u8]) -> Option<Vec<u8>> {
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let value = |d: u8| (d as char).to_digit(16).map(|v| v as u8);
    digits
        .chunks(2)
        .map(|p| Some(value(p[0])? << 4 | value(p[1])?))
        .collect()
}

/// The params of `message`, a valid request.
fn params_of<'a>(message: &'a [u8], arena: &'a bumpalo::Bump) -> Option<Params<'a>> {
    rpcwire::parse(message, arena)
        .expect("a valid request")
        .into_single()
        .and_then(|e| e.request())
        .expect("a request")
        .params()
}

pub fn check(data: &[u8]) {
    // Only bytes a JSON string holds as they are: the decoders see the
    // string's raw content.
    if data
        .iter()
        .any(|&b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b))
    {
        return;
    }
    let mut message = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":["0x"#.to_vec();
    message.extend_from_slice(data);
    message.extend_from_slice(br#""]}"#);
    let arena = bumpalo::Bump::new();
    let params = params_of(&message, &arena);
    let want = reference(data);
    let address = EthParams::new(params).next_address("a").ok();
    let hash = EthParams::new(params).next_hash("h").ok();
    block_ids_agree(params);
    let mut bare = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[""#.to_vec();
    bare.extend_from_slice(data);
    bare.extend_from_slice(br#""]}"#);
    block_ids_agree(params_of(&bare, &arena));
    let bytes = EthParams::new(params)
        .next_bytes_in("b", &arena)
        .ok()
        .map(<[u8]>::to_vec);
    assert_eq!(bytes, want, "data");
    // Not the last element: the end is the string's own quote, and a
    // later element's quote must not be taken for it.
    let mut message = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":["0x"#.to_vec();
    message.extend_from_slice(data);
    message.extend_from_slice(br#"", "0x"#);
    message.extend_from_slice(data);
    message.extend_from_slice(br#"" ]}"#);
    let params = params_of(&message, &arena);
    let mut both = EthParams::new(params);
    let first = both.next_bytes_in("first", &arena).ok().map(<[u8]>::to_vec);
    assert_eq!(first, want, "data before another element");
    if want.is_some() {
        let second = both
            .next_bytes_in("second", &arena)
            .ok()
            .map(<[u8]>::to_vec);
        assert_eq!(second, want, "data after another element");
        assert!(both.finish().is_ok());
    }
    let through_param = EthParams::new(params)
        .required("p")
        .and_then(|p| p.bytes_in(&arena))
        .ok()
        .map(<[u8]>::to_vec);
    assert_eq!(through_param, want, "data through a Param");
    assert_eq!(
        address.map(|a| a.to_vec()),
        want.clone().filter(|w| w.len() == 20),
        "address"
    );
    assert_eq!(
        hash.map(|h| h.to_vec()),
        want.filter(|w| w.len() == 32),
        "hash"
    );
}

/// `next_block_id` (tags and numbers matched where they lie) and
/// `optional(..).block_id()` (the general reader) agree.
fn block_ids_agree(params: Option<Params<'_>>) {
    let fused = EthParams::new(params).next_block_id("b");
    let general = EthParams::new(params)
        .optional("b")
        .map(|p| p.block_id())
        .transpose();
    assert_eq!(fused.ok(), general.ok(), "block id");
}
