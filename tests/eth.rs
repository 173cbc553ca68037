//! The `eth` layer: every QUANTITY / DATA rule, block ids in every form,
//! call objects and filters as real clients write them (checked against
//! alloy's serde decoding), writers round-tripping through the decoders and
//! agreeing with alloy's serde output, geth's codes, and the catalogue.

#[path = "../benches/support/corpus.rs"]
mod corpus;
#[path = "../benches/support/eth_params.rs"]
mod eth_params;

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use rpcwire::eth::{
    self, BlockId, BlockNumberOrTag, BlockTag, EthParams, EthReply, EthValue, TopicFilter,
};
use rpcwire::json::RawJson;
use rpcwire::request::Params;
use rpcwire::{Call, Connection, Dispatcher, RpcError};
use serde_json::{Value, json};

/// The params of a request whose params are `params` (JSON text).
fn with_params<T>(params: &str, f: impl FnOnce(Params<'_>) -> T) -> T {
    let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{params}}}"#);
    let arena = bumpalo::Bump::new();
    let p = rpcwire::parse(msg.as_bytes(), &arena)
        .unwrap_or_else(|e| panic!("{msg}: {e}"))
        .into_single()
        .unwrap()
        .request()
        .unwrap()
        .params()
        .unwrap();
    f(p)
}

/// One value, given as JSON text.
fn with_value<T>(json: &str, f: impl FnOnce(RawJson<'_>) -> T) -> T {
    with_params(&format!("[{json}]"), |p| f(p.nth(0).unwrap()))
}

/// The reason a decoder gave, or the value it decoded.
fn outcome<T>(r: Result<T, eth::Invalid<'_>>) -> Result<T, &'static str> {
    r.map_err(|e| e.reason())
}

fn data_of(e: &RpcError) -> Value {
    serde_json::from_str(e.data().expect("data")).expect("data is JSON")
}

// ---- storage keys -----------------------------------------------------------

/// `eth_getStorageAt`'s key in both forms clients send (geth's conformance
/// test sends the 32-byte word, ethers the QUANTITY); the QUANTITY decoder
/// refused the word for its leading zeros.
#[test]
fn storage_keys_in_both_forms() {
    let word = format!("\"0x{}01\"", "0".repeat(62));
    let cases: Vec<(String, Result<U256, &str>)> = vec![
        (r#""0x0""#.into(), Ok(U256::ZERO)),
        (r#""0x1""#.into(), Ok(U256::from(1))),
        (r#""0x0001""#.into(), Ok(U256::from(1))),
        (word, Ok(U256::from(1))),
        (format!("\"0x{}\"", "f".repeat(64)), Ok(U256::MAX)),
        (
            format!("\"0x0{}\"", "f".repeat(64)),
            Err("more than 64 hex digits"),
        ),
        (
            format!("\"0x{}g\"", "0".repeat(64)),
            Err("invalid hex digit"),
        ),
        // The spec's `bytesMax32`; geth and alloy read it as slot 0.
        (r#""0x""#.into(), Ok(U256::ZERO)),
        (r#""01""#.into(), Err("missing 0x prefix")),
        ("1".into(), Err("not a string")),
    ];
    for (json, want) in cases {
        let got = with_value(&json, |v| outcome(v.storage_key()));
        assert_eq!(got, want, "{json}");
    }
    assert_eq!(
        with_value(r#""0x0ab""#, |v| outcome(v.quantity_u256())),
        Err("leading zeros"),
        "QUANTITY stays strict"
    );
}

// ---- QUANTITY -------------------------------------------------------------

#[test]
fn quantity_rules() {
    let cases: &[(&str, Result<u64, &str>)] = &[
        (r#""0x0""#, Ok(0)),
        (r#""0x1""#, Ok(1)),
        (r#""0x400""#, Ok(0x400)),
        (r#""0xABCDEF""#, Ok(0xabcdef)),
        (r#""0xAbCdEf""#, Ok(0xabcdef)),
        (r#""0xffffffffffffffff""#, Ok(u64::MAX)),
        (r#""0x""#, Err("empty quantity (zero is 0x0)")),
        (r#""0x00""#, Err("leading zeros")),
        (r#""0x01""#, Err("leading zeros")),
        (r#""0x0400""#, Err("leading zeros")),
        (r#""400""#, Err("missing 0x prefix")),
        // As geth's hexutil reads a QUANTITY (and alloy): `0X` is a
        // prefix, and an empty string is zero.
        (r#""0X400""#, Ok(1024)),
        (r#""""#, Ok(0)),
        (r#""x1""#, Err("missing 0x prefix")),
        (r#""0xg""#, Err("invalid hex digit")),
        (r#""0x1 ""#, Err("invalid hex digit")),
        (r#""0x-1""#, Err("invalid hex digit")),
        (r#""0x1.5""#, Err("invalid hex digit")),
        (r#""0x10000000000000000""#, Err("more than 64 bits")),
        (r#""0x1000000000000000g""#, Err("invalid hex digit")),
        ("1024", Err("not a string")),
        ("null", Err("not a string")),
        ("true", Err("not a string")),
        (r#"["0x1"]"#, Err("not a string")),
        (r#"{"n":"0x1"}"#, Err("not a string")),
        // Escapes are JSON's business: the decoded text is checked.
        (r#""\u0030x1""#, Ok(1)),
        (r#""0x\u0030""#, Ok(0)),
        (r#""\u0030x01""#, Err("leading zeros")),
        (r#""0x\n""#, Err("invalid hex digit")),
    ];
    for (json, want) in cases {
        let got = with_value(json, |v| outcome(v.quantity_u64()));
        assert_eq!(got, *want, "{json}");
        // The wider decoders agree where the value fits.
        let wide = with_value(json, |v| outcome(v.quantity_u128()));
        match want {
            Ok(n) => assert_eq!(wide, Ok(*n as u128), "{json}"),
            Err("more than 64 bits") => assert!(wide.is_ok(), "{json}"),
            Err(r) => assert_eq!(wide, Err(*r), "{json}"),
        }
    }
}

#[test]
fn quantity_widths_and_u256_bounds() {
    let max128 = format!("\"0x{}\"", "f".repeat(32));
    assert_eq!(
        with_value(&max128, |v| v.quantity_u128().unwrap()),
        u128::MAX
    );
    let over128 = format!("\"0x1{}\"", "0".repeat(32));
    assert_eq!(
        with_value(&over128, |v| outcome(v.quantity_u128())),
        Err("more than 128 bits")
    );
    assert_eq!(
        with_value(&over128, |v| v.quantity_u256().unwrap()),
        U256::from(1u8) << 128
    );

    let max256 = format!("\"0x{}\"", "f".repeat(64));
    assert_eq!(
        with_value(&max256, |v| v.quantity_u256().unwrap()),
        U256::MAX
    );
    let max256_upper = format!("\"0x{}\"", "F".repeat(64));
    assert_eq!(
        with_value(&max256_upper, |v| v.quantity_u256().unwrap()),
        U256::MAX
    );
    // 65 hex digits: one more than 256 bits hold.
    let digits65 = format!("\"0x1{}\"", "0".repeat(64));
    assert_eq!(
        with_value(&digits65, |v| outcome(v.quantity_u256())),
        Err("more than 256 bits")
    );
    let bad65 = format!("\"0x1{}g\"", "0".repeat(63));
    assert_eq!(
        with_value(&bad65, |v| outcome(v.quantity_u256())),
        Err("invalid hex digit")
    );
    // Every bit length round-trips through U256's own formatting.
    for bits in 0..256usize {
        let v = if bits == 0 {
            U256::ZERO
        } else {
            U256::MAX >> (256 - bits)
        };
        let json = format!("\"{v:#x}\"");
        assert_eq!(
            with_value(&json, |x| x.quantity_u256().unwrap()),
            v,
            "{json}"
        );
    }
    assert_eq!(
        with_value(r#""0x00""#, |v| outcome(v.quantity_u256())),
        Err("leading zeros")
    );
    assert_eq!(
        with_value(r#""0x""#, |v| outcome(v.quantity_u256())),
        Err("empty quantity (zero is 0x0)")
    );
}

// ---- DATA -----------------------------------------------------------------

#[test]
fn data_rules() {
    let cases: &[(&str, Result<&[u8], &str>)] = &[
        (r#""0x""#, Ok(&[])),
        (r#""0x00""#, Ok(&[0])),
        (r#""0x00ff""#, Ok(&[0, 0xff])),
        (r#""0xABcd""#, Ok(&[0xab, 0xcd])),
        (r#""0xabc""#, Err("odd number of hex digits")),
        (r#""0x0""#, Err("odd number of hex digits")),
        (r#""00ff""#, Err("missing 0x prefix")),
        // As geth's hexutil reads DATA (and alloy).
        (r#""""#, Ok(&[])),
        (r#""0X00ff""#, Ok(&[0, 0xff])),
        (r#""0x0x00""#, Err("invalid hex digit")),
        (r#""0xzz""#, Err("invalid hex digit")),
        (r#""0x00 f""#, Err("invalid hex digit")),
        (r#""0x00 ff""#, Err("odd number of hex digits")),
        ("12", Err("not a string")),
        ("null", Err("not a string")),
        ("[]", Err("not a string")),
        (r#""\u0030x00ff""#, Ok(&[0, 0xff])),
    ];
    let arena = bumpalo::Bump::new();
    for (json, want) in cases {
        let checked = with_value(json, |v| outcome(v.data().map(|h| h.to_vec())));
        assert_eq!(checked, want.map(<[u8]>::to_vec), "{json}");
        let decoded = with_value(json, |v| outcome(v.bytes_in(&arena).map(<[u8]>::to_vec)));
        assert_eq!(decoded, want.map(<[u8]>::to_vec), "{json}");
    }
    // The borrowed view keeps the text.
    with_value(r#""0x00Ff""#, |v| {
        let h = v.data().unwrap();
        assert_eq!(
            (h.len(), h.as_str(), h.digits()),
            (2, Some("0x00Ff"), Some(&b"00Ff"[..]))
        );
        assert_eq!(h.to_bytes(), Bytes::from_static(&[0, 0xff]));
        assert_eq!(h.to_array::<2>(), Some([0, 0xff]));
        assert_eq!(h.to_array::<3>(), None);
    });
    with_value(r#""\u0030x00ff""#, |v| {
        let h = v.data().unwrap();
        assert_eq!((h.len(), h.as_str()), (2, None));
        assert_eq!(h.decode_in(&arena), &[0, 0xff]);
    });
}

/// DATA params decoded one after another keep the arena at about the
/// size of what they decode: a reader that sizes its output from the end
/// of the params first (the last element's fast path) gives those bytes
/// back when the value is not the last one, so the arena does not grow
/// with the square of the params' length. Long values (the AVX2 path) and
/// short ones, and refused values, which keep nothing.
#[test]
fn data_params_keep_the_arena_to_what_they_decode() {
    for digits in [64usize, 66, 2_000] {
        let one = format!("\"0x{}\"", "ab".repeat(digits / 2));
        let params = format!("[{}]", vec![one.as_str(); 300].join(","));
        with_params(&params, |p| {
            let arena = bumpalo::Bump::new();
            let mut values = EthParams::new(Some(p));
            let mut decoded = 0;
            for i in 0..300 {
                let bytes = values.next_bytes_in("data", &arena).expect("DATA");
                assert!(bytes.iter().all(|&b| b == 0xab), "value {i}");
                decoded += bytes.len();
            }
            values.finish().expect("no more params");
            assert_eq!(decoded, 300 * digits / 2);
            assert!(
                arena.allocated_bytes() < 4 * decoded + 64 * 1024,
                "{digits} digits: the arena holds {} bytes for {decoded} decoded",
                arena.allocated_bytes()
            );
        });
        // A refused value (a bad digit at its end) gives back what it took.
        let bad = format!("[\"0x{}zz\", 1]", "ab".repeat(digits / 2));
        with_params(&bad, |p| {
            let arena = bumpalo::Bump::with_capacity(64 * 1024);
            let room = arena.chunk_capacity();
            let refused = EthParams::new(Some(p)).next_bytes_in("data", &arena);
            assert_eq!(
                outcome(refused.map(<[u8]>::to_vec)),
                Err("invalid hex digit")
            );
            assert_eq!(arena.chunk_capacity(), room, "{digits} digits");
        });
    }
}

#[test]
fn fixed_size_data() {
    let a = "0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97";
    let checksummed = "0x4838B106FCe9647Bdf1E7877BF73cE8B0BAD5f97";
    for s in [a, checksummed] {
        assert_eq!(
            with_value(&format!("\"{s}\""), |v| v.address().unwrap()),
            a.parse::<Address>().unwrap()
        );
    }
    let short = format!("\"{}\"", &a[..40]);
    let e = with_value(&short, |v| {
        let e = v.address().unwrap_err();
        (e.reason(), e.expected_len(), data_of(&e.into()))
    });
    assert_eq!((e.0, e.1), ("wrong length", Some(20)));
    assert_eq!(e.2["expectedBytes"], 20);
    let long = format!("\"{a}00\"");
    assert_eq!(
        with_value(&long, |v| outcome(v.address())),
        Err("wrong length")
    );
    assert_eq!(
        with_value(&format!("\"{}\"", &a[..41]), |v| outcome(v.address())),
        Err("odd number of hex digits")
    );
    let h = "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b";
    assert_eq!(
        with_value(&format!("\"{h}\""), |v| v.hash().unwrap()),
        h.parse::<B256>().unwrap()
    );
    assert_eq!(
        with_value(&format!("\"{a}\""), |v| outcome(v.hash())),
        Err("wrong length")
    );
    assert_eq!(
        with_value(r#""0x01020304""#, |v| v.data_array::<4>().unwrap()),
        [1, 2, 3, 4]
    );
    assert_eq!(
        with_value(r#""0x""#, |v| v.data_array::<0>().unwrap()),
        [0u8; 0]
    );
}

// ---- errors as the client sees them --------------------------------------

#[test]
fn refusals_name_the_param() {
    let cases: &[(&str, Value)] = &[
        (
            r#"["0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97","0x01"]"#,
            json!({"param":"blockNumber","position":1,"reason":"leading zeros","received":"0x01"}),
        ),
        (
            r#"["0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97", "Latest"]"#,
            json!({"param":"blockNumber","position":1,"reason":"not a block tag, number, hash or EIP-1898 object","received":"Latest"}),
        ),
        (
            r#"["4838b106fce9647bdf1e7877bf73ce8b0bad5f97","latest"]"#,
            json!({"param":"address","position":0,"reason":"missing 0x prefix","received":"4838b106fce9647bdf1e7877bf73ce8b0bad5f97"}),
        ),
        (
            r#"[12,"latest"]"#,
            json!({"param":"address","position":0,"reason":"not a string","received":12}),
        ),
        (
            r#"[]"#,
            json!({"param":"address","position":0,"reason":"missing value"}),
        ),
        (
            r#"[null]"#,
            json!({"param":"address","position":0,"reason":"missing value"}),
        ),
        (
            r#"{"address":"0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97"}"#,
            json!({"param":"address","position":0,"reason":"params must be an array"}),
        ),
        (
            r#"["0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97","latest",true]"#,
            // At its position, unnamed (no parameter has it).
            json!({"position":2,"reason":"too many params","received":true}),
        ),
        (
            r#"["0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97",{"blockHash":"0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b","blockNumber":"0x1"}]"#,
            // Long values are cut: the first 64 characters of their text.
            json!({"param":"blockNumber","position":1,"reason":"both blockHash and blockNumber","received":"{\"blockHash\":\"0x88df016429689c079f3b2f6ad39fa052532c56795b733da7…","receivedLength":102}),
        ),
        (
            r#"["0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97",{"blockNumber":"0x01"}]"#,
            json!({"param":"blockNumber","position":1,"field":"blockNumber","reason":"leading zeros","received":"0x01"}),
        ),
    ];
    for (params, want) in cases {
        let e = with_params(params, |p| {
            let mut p = EthParams::new(Some(p));
            let r = (|| {
                p.required("address")?.address()?;
                if let Some(b) = p.optional("blockNumber") {
                    b.block_id()?;
                }
                p.clone().finish()
            })();
            RpcError::from(r.unwrap_err())
        });
        assert_eq!(e.code(), -32602, "{params}");
        assert_eq!(e.message(), "Invalid params");
        assert_eq!(data_of(&e), *want, "{params}");
    }
    // Absent params are no params.
    let mut p = EthParams::new(None);
    assert!(p.optional("block").is_none());
    assert_eq!(p.required("x").unwrap_err().reason(), "missing value");
    assert!(EthParams::new(None).finish().is_ok());
}

#[test]
fn long_received_values_are_cut() {
    let long = format!("\"0x{}\"", "z".repeat(500));
    let e = with_value(&long, |v| {
        RpcError::from(v.data().unwrap_err().at("input", 0))
    });
    let data = data_of(&e);
    assert_eq!(data["reason"], "invalid hex digit");
    assert_eq!(data["receivedLength"], 504);
    let shown = data["received"].as_str().unwrap();
    assert!(
        shown.starts_with("0xzzz") && shown.ends_with('…') && shown.len() < 80,
        "{shown}"
    );
    // Display, for logs.
    let msg = with_params(r#"[{"gas":"0x01"}]"#, |p| {
        let tx = EthParams::new(Some(p))
            .required("transaction")
            .unwrap()
            .call_request()
            .unwrap();
        tx.gas().unwrap_err().to_string()
    });
    assert_eq!(msg, "invalid transaction.gas (param 0): leading zeros");
}

// ---- block ids ------------------------------------------------------------

#[test]
fn block_ids_in_every_form() {
    let h = "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b";
    let hash: B256 = h.parse().unwrap();
    let ok: Vec<(String, BlockId)> = vec![
        ("\"earliest\"".into(), BlockId::Tag(BlockTag::Earliest)),
        ("\"finalized\"".into(), BlockId::Tag(BlockTag::Finalized)),
        ("\"safe\"".into(), BlockId::Tag(BlockTag::Safe)),
        ("\"latest\"".into(), BlockId::Tag(BlockTag::Latest)),
        ("\"pending\"".into(), BlockId::Tag(BlockTag::Pending)),
        ("\"0x0\"".into(), BlockId::Number(0)),
        ("\"0x12a05f2\"".into(), BlockId::Number(0x12a05f2)),
        (
            format!("\"{h}\""),
            BlockId::Hash {
                hash,
                require_canonical: None,
            },
        ),
        (
            format!(r#"{{"blockHash":"{h}"}}"#),
            BlockId::Hash {
                hash,
                require_canonical: None,
            },
        ),
        (
            format!(r#"{{"blockHash":"{h}","requireCanonical":true}}"#),
            BlockId::Hash {
                hash,
                require_canonical: Some(true),
            },
        ),
        (
            format!(r#"{{ "requireCanonical": false, "blockHash": "{h}" }}"#),
            BlockId::Hash {
                hash,
                require_canonical: Some(false),
            },
        ),
        (r#"{"blockNumber":"0x10"}"#.into(), BlockId::Number(16)),
        (
            r#"{"blockNumber":"latest"}"#.into(),
            BlockId::Tag(BlockTag::Latest),
        ),
        (r#"{"block\u004eumber":"0x10"}"#.into(), BlockId::Number(16)),
    ];
    for (json, want) in &ok {
        assert_eq!(with_value(json, |v| v.block_id().unwrap()), *want, "{json}");
        // alloy reads the same.
        let theirs: alloy_rpc_types_eth::BlockId = serde_json::from_str(json).unwrap();
        assert_eq!(to_alloy(*want), theirs, "{json}");
    }
    // A member given as `null` is absent, as geth reads the object (and
    // as a log filter's and a call object's are read); alloy refuses
    // these.
    let by_hash = |require_canonical| BlockId::Hash {
        hash,
        require_canonical,
    };
    let with_nulls = [
        (
            format!(r#"{{"blockHash":"{h}","blockNumber":null}}"#),
            by_hash(None),
        ),
        (
            format!(r#"{{"blockHash":"{h}","requireCanonical":null}}"#),
            by_hash(None),
        ),
        (
            r#"{"blockNumber":"0x10","blockHash":null}"#.to_string(),
            BlockId::Number(16),
        ),
    ];
    for (json, want) in &with_nulls {
        assert_eq!(with_value(json, |v| v.block_id().unwrap()), *want, "{json}");
        with_params(&format!("[{json}]"), |p| {
            let mut values = EthParams::new(Some(p));
            assert_eq!(
                values.next_block_id("block").unwrap(),
                Some(*want),
                "{json}"
            );
        });
    }
    let bad: &[(&str, &str)] = &[
        (
            r#""Latest""#,
            "not a block tag, number, hash or EIP-1898 object",
        ),
        (
            r#""LATEST""#,
            "not a block tag, number, hash or EIP-1898 object",
        ),
        (r#""0x01""#, "leading zeros"),
        (r#""0x""#, "empty quantity (zero is 0x0)"),
        (r#""0x10000000000000000""#, "more than 64 bits"),
        (
            r#""123""#,
            "not a block tag, number, hash or EIP-1898 object",
        ),
        ("123", "not a block tag, number, hash or EIP-1898 object"),
        ("true", "not a block tag, number, hash or EIP-1898 object"),
        ("[]", "not a block tag, number, hash or EIP-1898 object"),
        ("{}", "neither blockHash nor blockNumber"),
        (
            r#"{"blockNumber":null}"#,
            "neither blockHash nor blockNumber",
        ),
        (
            r#"{"blockNumber":"0x1","requireCanonical":true}"#,
            "requireCanonical without blockHash",
        ),
        (
            r#"{"blockNumber":"0x1","blockNumber":"0x2"}"#,
            "duplicate member",
        ),
        (r#"{"blockNumber":"0x1","extra":1}"#, "unknown member"),
        (
            r#"{"requireCanonical":true}"#,
            "neither blockHash nor blockNumber",
        ),
        (r#"{"blockHash":"0x1234"}"#, "wrong length"),
        (r#"{"blockNumber":12}"#, "not a string"),
    ];
    for (json, reason) in bad {
        assert_eq!(
            with_value(json, |v| outcome(v.block_id())),
            Err(*reason),
            "{json}"
        );
    }
    let e = with_value(
        &format!(r#"{{"blockHash":"{h}","requireCanonical":1}}"#),
        |v| v.block_id().unwrap_err().reason(),
    );
    assert_eq!(e, "not a boolean");
    // A hash of the wrong size says which size it needs, as every fixed-size
    // value does.
    let e = with_value(r#"{"blockHash":"0x1234"}"#, |v| {
        v.block_id().unwrap_err().expected_len()
    });
    assert_eq!(e, Some(32));

    // Block numbers: tags and numbers only.
    assert_eq!(
        with_value("\"pending\"", |v| v.block_number().unwrap()),
        BlockNumberOrTag::Tag(BlockTag::Pending)
    );
    assert_eq!(
        with_value("\"0x1b4\"", |v| v.block_number().unwrap()),
        BlockNumberOrTag::Number(0x1b4)
    );
    assert_eq!(
        with_value(&format!("\"{h}\""), |v| outcome(v.block_number())),
        Err("more than 64 bits")
    );
    assert_eq!(
        with_value("\"Safe\"", |v| outcome(v.block_number())),
        Err("not a block tag or number")
    );
    assert!(BlockId::Number(5).is_pinned());
    // Every tag can name another block later: `earliest` too, which geth
    // answers with its history pruning cutoff (block 0 only on a node
    // that keeps all history).
    for t in BlockTag::ALL {
        assert!(!BlockId::Tag(t).is_pinned(), "{t}");
        assert_eq!(BlockId::Tag(t).number(), None, "{t}");
        assert_eq!(BlockNumberOrTag::Tag(t).number(), None, "{t}");
    }
    for t in BlockTag::ALL {
        assert_eq!(BlockTag::from_bytes(t.as_str().as_bytes()), Some(t));
    }
    assert_eq!(BlockNumberOrTag::Number(0x1b4).to_string(), "0x1b4");
}

fn to_alloy(b: BlockId) -> alloy_rpc_types_eth::BlockId {
    use alloy_rpc_types_eth::BlockNumberOrTag as N;
    match b {
        BlockId::Number(n) => alloy_rpc_types_eth::BlockId::Number(N::Number(n)),
        BlockId::Tag(t) => alloy_rpc_types_eth::BlockId::Number(match t {
            BlockTag::Earliest => N::Earliest,
            BlockTag::Finalized => N::Finalized,
            BlockTag::Safe => N::Safe,
            BlockTag::Latest => N::Latest,
            BlockTag::Pending => N::Pending,
        }),
        BlockId::Hash {
            hash,
            require_canonical,
        } => alloy_rpc_types_eth::BlockId::Hash(alloy_eips_hash(hash, require_canonical)),
    }
}

fn alloy_eips_hash(
    hash: B256,
    require_canonical: Option<bool>,
) -> alloy_rpc_types_eth::RpcBlockHash {
    alloy_rpc_types_eth::RpcBlockHash {
        block_hash: hash,
        require_canonical,
    }
}

// ---- call objects ---------------------------------------------------------

/// Our reading of a call object and alloy's must agree on every member.
fn assert_call_agrees(json: &str) {
    let theirs: alloy_rpc_types_eth::TransactionRequest = serde_json::from_str(json).unwrap();
    let arena = bumpalo::Bump::new();
    with_value(json, |v| {
        let tx = v.call_request().unwrap();
        assert_eq!(tx.from().unwrap(), theirs.from, "{json}");
        let to = match theirs.to {
            Some(TxKind::Call(a)) => Some(a),
            _ => None,
        };
        assert_eq!(tx.to().unwrap(), to, "{json}");
        assert_eq!(tx.gas().unwrap(), theirs.gas, "{json}");
        assert_eq!(tx.gas_price().unwrap(), theirs.gas_price, "{json}");
        assert_eq!(
            tx.max_fee_per_gas().unwrap(),
            theirs.max_fee_per_gas,
            "{json}"
        );
        assert_eq!(
            tx.max_priority_fee_per_gas().unwrap(),
            theirs.max_priority_fee_per_gas,
            "{json}"
        );
        assert_eq!(
            tx.max_fee_per_blob_gas().unwrap(),
            theirs.max_fee_per_blob_gas
        );
        assert_eq!(tx.value().unwrap(), theirs.value, "{json}");
        assert_eq!(tx.nonce().unwrap(), theirs.nonce, "{json}");
        assert_eq!(tx.chain_id().unwrap(), theirs.chain_id, "{json}");
        assert_eq!(tx.tx_type().unwrap(), theirs.transaction_type, "{json}");
        let input = tx.input().unwrap().map(|h| h.to_bytes());
        assert_eq!(input.as_ref(), theirs.input.input(), "{json}");
        let in_arena = tx.input_in(&arena).unwrap().map(<[u8]>::to_vec);
        assert_eq!(in_arena, theirs.input.input().map(|b| b.to_vec()), "{json}");
        let hashes: Vec<B256> = tx
            .blob_versioned_hashes()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            hashes,
            theirs.blob_versioned_hashes.clone().unwrap_or_default()
        );
        assert_eq!(tx.access_list().is_some(), theirs.access_list.is_some());
    });
}

#[test]
fn call_objects_from_real_clients() {
    // viem `readContract` (balanceOf), `call` with an account, and a
    // Multicall3 aggregate.
    assert_call_agrees(
        r#"{"data":"0x70a08231000000000000000000000000d8da6bf26964af9d7eed9e03e53415d37aa96045","to":"0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"}"#,
    );
    assert_call_agrees(
        r#"{"data":"0x06fdde03","from":"0xd8da6bf26964af9d7eed9e03e53415d37aa96045","to":"0x6b175474e89094c44da98b954eedeac495271d0f"}"#,
    );
    assert_call_agrees(
        r#"{"data":"0x82ad56cb00000000000000000000000000000000000000000000000000000000000000200000000000000000000000000000000000000000000000000000000000000000","to":"0xca11bde05977b3631167028862be2a173976ca11"}"#,
    );
    // viem `estimateGas` / `prepareTransactionRequest`: EIP-1559 fields.
    assert_call_agrees(
        r#"{"from":"0xd8da6bf26964af9d7eed9e03e53415d37aa96045","gas":"0x5208","maxFeePerGas":"0x6fc23ac00","maxPriorityFeePerGas":"0x3b9aca00","nonce":"0x2a","to":"0x70997970c51812dc3a010c7d01b50e0d17dc79c8","value":"0xde0b6b3a7640000"}"#,
    );
    // ethers v6 `getRpcTransaction`: lowercase hex, `to` before `data`.
    assert_call_agrees(
        r#"{"to":"0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2","data":"0x18160ddd"}"#,
    );
    assert_call_agrees(
        r#"{"type":"0x2","gas":"0x186a0","to":"0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2","from":"0xd8da6bf26964af9d7eed9e03e53415d37aa96045","data":"0xd0e30db0","value":"0x2386f26fc10000","maxFeePerGas":"0x77359400","maxPriorityFeePerGas":"0x59682f00","chainId":"0x1","accessList":[]}"#,
    );
    // `type` is the spec's `byte`: `0x02` as alloy reads it (it was refused
    // for its leading zero, as a QUANTITY).
    assert_call_agrees(r#"{"type":"0x02","to":"0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2"}"#);
    assert_call_agrees(r#"{"type":"0x7e"}"#);
    with_value(r#"{"type":"0x100"}"#, |v| {
        let e = v.call_request().unwrap().tx_type().unwrap_err();
        assert_eq!(e.reason(), "more than 8 bits");
    });
    // `0x` alone matches the spec's `byte` pattern: 0, as alloy reads it.
    with_value(r#"{"type":"0x"}"#, |v| {
        assert_eq!(v.call_request().unwrap().tx_type(), Ok(Some(0)));
    });
    // web3.py: spaces and EIP-55 checksummed addresses, legacy gas price.
    assert_call_agrees(
        r#"{"to": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "data": "0x313ce567"}"#,
    );
    assert_call_agrees(
        r#"{"from": "0xd8dA6BF26964aF9D7eEd9e03E53415D37aA96045", "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "value": "0x1", "gas": "0x5208", "gasPrice": "0x4a817c800", "nonce": "0x0", "chainId": "0x1"}"#,
    );
    // foundry / alloy: `input`, both names equal, contract creation, blobs.
    assert_call_agrees(r#"{"input":"0x6080604052","to":null}"#);
    assert_call_agrees(
        r#"{"input":"0xabcd","data":"0xABCD","to":"0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2"}"#,
    );
    assert_call_agrees(
        r#"{"to":"0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2","maxFeePerBlobGas":"0x3b9aca00","blobVersionedHashes":["0x01b0a4cdd5f55589f5c5b4d46c76704bb6ce95c0a8c09f77f197a57808dded28"],"type":"0x3"}"#,
    );
    // Unknown members are ignored, as alloy and geth do.
    assert_call_agrees(
        r#"{"to":"0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2","ccipReadEnabled":true}"#,
    );
    assert_call_agrees("{}");
}

#[test]
fn call_object_refusals() {
    let cases: &[(&str, &str, &str)] = &[
        (r#"{"gas":"0x01"}"#, "gas", "leading zeros"),
        (r#"{"gas":21000}"#, "gas", "not a string"),
        (r#"{"value":"0x"}"#, "value", "empty quantity (zero is 0x0)"),
        (r#"{"to":"0x1234"}"#, "to", "wrong length"),
        (
            r#"{"from":"0xd8da6bf26964af9d7eed9e03e53415d37aa9604"}"#,
            "from",
            "odd number of hex digits",
        ),
        (r#"{"data":"0x123"}"#, "data", "odd number of hex digits"),
        (r#"{"input":"abcd"}"#, "input", "missing 0x prefix"),
        (r#"{"type":"0x100"}"#, "type", "more than 8 bits"),
        (
            r#"{"maxFeePerGas":"0x100000000000000000000000000000000"}"#,
            "maxFeePerGas",
            "more than 128 bits",
        ),
    ];
    for (json, field, reason) in cases {
        let e = with_params(&format!("[{json},\"latest\"]"), |p| {
            let tx = EthParams::new(Some(p))
                .required("transaction")
                .unwrap()
                .call_request()
                .unwrap();
            let r = (|| {
                tx.from()?;
                tx.to()?;
                tx.gas()?;
                tx.value()?;
                tx.max_fee_per_gas()?;
                tx.tx_type()?;
                tx.input()?;
                Ok::<_, eth::Invalid<'_>>(())
            })();
            RpcError::from(r.unwrap_err())
        });
        let data = data_of(&e);
        assert_eq!(data["param"], "transaction", "{json}");
        assert_eq!(data["position"], 0, "{json}");
        assert_eq!(data["field"], *field, "{json}");
        assert_eq!(data["reason"], *reason, "{json}");
    }
    let whole = |json: &str| with_value(json, |v| outcome(v.call_request().map(|_| ())));
    assert_eq!(
        whole(r#"{"to":"0x00","to":"0x01"}"#),
        Err("duplicate member")
    );
    assert_eq!(whole(r#""0x00""#), Err("not an object"));
    assert_eq!(
        with_value(r#"{"data":"0x01","input":"0x02"}"#, |v| outcome(
            v.call_request().unwrap().input().map(|_| ())
        )),
        Err("data and input both set and different")
    );
    with_value(r#"{"to":null,"gas":null,"data":null}"#, |v| {
        let tx = v.call_request().unwrap();
        assert_eq!((tx.to().unwrap(), tx.gas().unwrap()), (None, None));
        assert!(tx.input().unwrap().is_none() && tx.raw("to").is_none());
    });
    with_value(r#"{"gas":"0x1","nonce":"0x2"}"#, |v| {
        let tx = v.call_request().unwrap();
        assert_eq!(tx.raw("nonce").unwrap().as_bytes(), b"\"0x2\"");
        assert!(tx.raw("unknown").is_none());
        assert_eq!(tx.as_json().as_bytes(), br#"{"gas":"0x1","nonce":"0x2"}"#);
    });
}

// ---- filters --------------------------------------------------------------

fn assert_filter_agrees(json: &str) {
    let theirs: alloy_rpc_types_eth::Filter = serde_json::from_str(json).unwrap();
    with_value(json, |v| {
        let f = v.log_filter().unwrap();
        use alloy_rpc_types_eth::FilterBlockOption as O;
        let to_alloy = |b: Option<BlockNumberOrTag>| {
            b.map(|b| match b {
                BlockNumberOrTag::Number(n) => alloy_rpc_types_eth::BlockNumberOrTag::Number(n),
                BlockNumberOrTag::Tag(t) => match to_alloy(BlockId::Tag(t)) {
                    alloy_rpc_types_eth::BlockId::Number(n) => n,
                    _ => unreachable!(),
                },
            })
        };
        match &theirs.block_option {
            O::Range {
                from_block,
                to_block,
            } => {
                assert_eq!(to_alloy(f.from_block().unwrap()), *from_block, "{json}");
                assert_eq!(to_alloy(f.to_block().unwrap()), *to_block, "{json}");
                assert_eq!(f.block_hash().unwrap(), None);
            }
            O::AtBlockHash(h) => assert_eq!(f.block_hash().unwrap(), Some(*h), "{json}"),
        }
        let mut ours: Vec<Address> = f.addresses().unwrap().map(Result::unwrap).collect();
        let mut want: Vec<Address> = theirs.address.iter().copied().collect();
        ours.sort();
        ours.dedup();
        want.sort();
        assert_eq!(ours, want, "{json}");
        let mut positions = 0;
        for (i, t) in f.topics().unwrap().enumerate() {
            positions += 1;
            let mut got: Vec<B256> = match t.unwrap() {
                TopicFilter::Any => vec![],
                TopicFilter::One(h) => vec![h],
                TopicFilter::AnyOf(set) => set.map(Result::unwrap).collect(),
            };
            let mut want: Vec<B256> = theirs.topics[i].iter().copied().collect();
            got.sort();
            got.dedup();
            want.sort();
            assert_eq!(got, want, "{json} topic {i}");
        }
        for i in positions..4 {
            assert!(theirs.topics[i].is_empty());
        }
    });
}

#[test]
fn filters_from_real_clients() {
    let transfer = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    let approval = "0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925";
    let me = "0x000000000000000000000000d8da6bf26964af9d7eed9e03e53415d37aa96045";
    // viem `getLogs` / `getContractEvents`: address, topics, range.
    assert_filter_agrees(&format!(
        r#"{{"address":"0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48","topics":["{transfer}",null,"{me}"],"fromBlock":"0x1312d00","toBlock":"0x1313500"}}"#
    ));
    assert_filter_agrees(&format!(
        r#"{{"address":["0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48","0xdac17f958d2ee523a2206206994597c13d831ec7"],"topics":[["{transfer}","{approval}"]],"blockHash":"0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b"}}"#
    ));
    // ethers v6: the range first, `latest`.
    assert_filter_agrees(&format!(
        r#"{{"fromBlock":"0x1312d00","toBlock":"latest","address":"0xdac17f958d2ee523a2206206994597c13d831ec7","topics":["{transfer}"]}}"#
    ));
    // web3.py: spaces, checksummed address, `earliest`.
    assert_filter_agrees(&format!(
        r#"{{"fromBlock": "earliest", "toBlock": "0x1312d00", "address": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "topics": ["{transfer}", null, null, "{me}"]}}"#
    ));
    assert_filter_agrees("{}");
    assert_filter_agrees(r#"{"address":null,"topics":null,"fromBlock":null}"#);
    assert_filter_agrees(&format!(r#"{{"topics":[null,["{me}"]]}}"#));

    // A null among alternatives matches anything (geth).
    with_value(&format!(r#"{{"topics":[["{transfer}",null]]}}"#), |v| {
        let t = v
            .log_filter()
            .unwrap()
            .topics()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(t, TopicFilter::Any);
    });
    // An empty list filters nothing, as geth and alloy read it.
    with_value(r#"{"address":[]}"#, |v| {
        let a = v.log_filter().unwrap().addresses().unwrap();
        assert!(a.is_any());
        assert_eq!(a.count(), 0);
    });
    // No topic alternatives: a wildcard at that position, not "match
    // nothing" (it was once an empty `AnyOf`).
    with_value(
        r#"{"topics":[[],"0x0000000000000000000000000000000000000000000000000000000000000001"]}"#,
        |v| {
            let mut topics = v.log_filter().unwrap().topics().unwrap();
            assert_eq!(topics.next().unwrap().unwrap(), TopicFilter::Any);
            assert!(matches!(
                topics.next().unwrap().unwrap(),
                TopicFilter::One(_)
            ));
        },
    );
}

#[test]
fn filter_refusals() {
    let h = "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b";
    let whole = |json: &str| with_value(json, |v| outcome(v.log_filter().map(|_| ())));
    assert_eq!(
        whole(&format!(r#"{{"blockHash":"{h}","fromBlock":"0x1"}}"#)),
        Err("blockHash together with fromBlock or toBlock")
    );
    assert_eq!(
        whole(&format!(r#"{{"blockHash":"{h}","fromBlock":null}}"#)),
        Ok(())
    );
    assert_eq!(
        whole(r#"{"address":"0x00","address":"0x01"}"#),
        Err("duplicate member")
    );
    assert_eq!(whole("[]"), Err("not an object"));

    let topics = |json: &str| {
        with_value(json, |v| {
            let f = v.log_filter().unwrap();
            outcome(
                f.topics()
                    .and_then(|t| t.collect::<Result<Vec<_>, _>>())
                    .map(|t| t.len()),
            )
        })
    };
    assert_eq!(
        topics(r#"{"topics":[null,null,null,null,null]}"#),
        Err("more than 4 topic positions")
    );
    assert_eq!(topics(r#"{"topics":[null,null,null,null]}"#), Ok(4));
    assert_eq!(
        topics(r#"{"topics":"0x00"}"#),
        Err("not an array of topics")
    );
    assert_eq!(topics(r#"{"topics":[1]}"#), Err("not an array of topics"));
    assert_eq!(topics(r#"{"topics":["0x1234"]}"#), Err("wrong length"));
    let e = with_params(r#"[{"fromBlock":"0x01"}]"#, |p| {
        let f = EthParams::new(Some(p))
            .required("filter")
            .unwrap()
            .log_filter()
            .unwrap();
        data_of(&RpcError::from(f.from_block().unwrap_err()))
    });
    assert_eq!(
        e,
        json!({"param":"filter","position":0,"field":"fromBlock","reason":"leading zeros","received":"0x01"})
    );
    let addresses = |json: &str| {
        with_value(json, |v| {
            let f = v.log_filter().unwrap();
            outcome(
                f.addresses()
                    .and_then(|a| a.collect::<Result<Vec<_>, _>>())
                    .map(|a| a.len()),
            )
        })
    };
    assert_eq!(
        addresses(r#"{"address":5}"#),
        Err("not an address or an array of addresses")
    );
    assert_eq!(addresses(r#"{"address":["0x12"]}"#), Err("wrong length"));
}

// ---- the corpus the benchmark runs, against alloy -------------------------

#[test]
fn generated_traffic_agrees_with_alloy() {
    for (k, method) in eth_params::METHODS.iter().enumerate() {
        for msg in eth_params::messages(method, 0x5eed + k as u64, 1500) {
            let text = String::from_utf8(msg).unwrap();
            let v: Value = serde_json::from_str(&text).unwrap();
            let params = serde_json::to_string(&v["params"]).unwrap();
            let first = serde_json::to_string(&v["params"][0]).unwrap();
            match *method {
                "eth_call" => assert_call_agrees(&first),
                "eth_getLogs" => assert_filter_agrees(&first),
                "eth_getBalance" => {
                    let (a, b): (Address, alloy_rpc_types_eth::BlockId) =
                        serde_json::from_str(&params).unwrap();
                    with_params(&params, |p| {
                        let mut p = EthParams::new(Some(p));
                        assert_eq!(p.required("address").unwrap().address().unwrap(), a);
                        let ours = p.required("block").unwrap().block_id().unwrap();
                        assert_eq!(to_alloy(ours), b, "{params}");
                    });
                }
                _ => {
                    let (b,): (Bytes,) = serde_json::from_str(&params).unwrap();
                    let arena = bumpalo::Bump::new();
                    with_params(&params, |p| {
                        let mut p = EthParams::new(Some(p));
                        assert_eq!(p.required("tx").unwrap().bytes_in(&arena).unwrap(), &b[..]);
                    });
                }
            }
        }
    }
}

// ---- writers --------------------------------------------------------------

fn written(f: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::new();
    f(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn writers_round_trip_and_agree_with_alloy() {
    let mut rng = corpus::Rng::new(3);
    let mut quantities: Vec<u128> =
        vec![0, 1, 15, 16, 255, 256, u64::MAX as u128, 1 << 64, u128::MAX];
    for bits in 1..=128u32 {
        quantities.push(((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) >> (128 - bits));
    }
    for q in quantities {
        let text = written(|o| eth::write::quantity(o, q));
        assert_eq!(text, serde_json::to_string(&U256::from(q)).unwrap());
        assert_eq!(with_value(&text, |v| v.quantity_u128().unwrap()), q);
        if let Ok(small) = u64::try_from(q) {
            assert_eq!(with_value(&text, |v| v.quantity_u64().unwrap()), small);
            assert_eq!(text, format!("\"{small:#x}\""));
        }
    }
    let mut wide = vec![
        U256::ZERO,
        U256::MAX,
        U256::from(1u8) << 255,
        U256::from(u128::MAX) + U256::from(1u8),
    ];
    for bits in 1..=256usize {
        let limbs = [
            rng.next_u64(),
            rng.next_u64(),
            rng.next_u64(),
            rng.next_u64(),
        ];
        wide.push(U256::from_limbs(limbs) >> (256 - bits));
    }
    for v in wide {
        let text = written(|o| eth::write::quantity_u256(o, &v));
        assert_eq!(text, serde_json::to_string(&v).unwrap());
        assert_eq!(with_value(&text, |x| x.quantity_u256().unwrap()), v);
    }
    for len in [0usize, 1, 2, 20, 31, 32, 33, 511, 512, 513, 1500, 4096] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        let text = written(|o| eth::write::data(o, &bytes));
        assert_eq!(
            text,
            serde_json::to_string(&Bytes::from(bytes.clone())).unwrap()
        );
        let arena = bumpalo::Bump::new();
        assert_eq!(
            with_value(&text, |v| v.bytes_in(&arena).unwrap().to_vec()),
            bytes
        );
    }
    let a = Address::from([0xab; 20]);
    let text = written(|o| eth::write::address(o, &a));
    assert_eq!(
        text.to_lowercase(),
        serde_json::to_string(&a).unwrap().to_lowercase()
    );
    assert_eq!(text, format!("\"{a:#x}\""));
    assert_eq!(with_value(&text, |v| v.address().unwrap()), a);
    let h = B256::from([0x5c; 32]);
    let text = written(|o| eth::write::hash(o, &h));
    assert_eq!(text, serde_json::to_string(&h).unwrap());
    assert_eq!(with_value(&text, |v| v.hash().unwrap()), h);
}

#[test]
fn eth_reply_through_the_dispatcher() {
    let big: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    let big2 = big.clone();
    let d = Dispatcher::builder(())
        .method("q", |c: Call<'_, ()>| EthReply::quantity(c.reply, 0x1b4))
        .method("q256", |c: Call<'_, ()>| c.reply.quantity_u256(U256::MAX))
        .method("data", |c: Call<'_, ()>| {
            EthReply::data(c.reply, &[1, 2, 0xff])
        })
        .method("big", move |c: Call<'_, ()>| c.reply.data(&big2))
        .method("addr", |c: Call<'_, ()>| {
            c.reply.address(&Address::from([0x11; 20]))
        })
        .method("hash", |c: Call<'_, ()>| c.reply.hash(&B256::ZERO))
        .method("echo", |c: Call<'_, ()>| {
            let mut p = EthParams::new(c.params);
            let n = p.required("n")?.quantity_u64()?;
            p.finish()?;
            EthReply::quantity(c.reply, n as u128 + 1)
        })
        .build()
        .unwrap();
    let call = |method: &str, params: &str| {
        let mut conn = Connection::new();
        let mut out = Vec::new();
        let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
        d.handle(msg.as_bytes(), &mut conn, &mut out);
        let v: Value = serde_json::from_slice(&out).unwrap();
        v
    };
    assert_eq!(call("q", "[]")["result"], "0x1b4");
    assert_eq!(
        call("q256", "[]")["result"],
        format!("0x{}", "f".repeat(64))
    );
    assert_eq!(call("data", "[]")["result"], "0x0102ff");
    assert_eq!(
        call("big", "[]")["result"],
        const_hex::encode_prefixed(&big)
    );
    assert_eq!(
        call("addr", "[]")["result"],
        format!("0x{}", "11".repeat(20))
    );
    assert_eq!(
        call("hash", "[]")["result"],
        format!("0x{}", "00".repeat(32))
    );
    assert_eq!(call("echo", r#"["0x1b3"]"#)["result"], "0x1b4");
    let e = call("echo", r#"["0x01b3"]"#);
    assert_eq!(e["error"]["code"], -32602);
    assert_eq!(
        e["error"]["data"],
        json!({"param":"n","position":0,"reason":"leading zeros","received":"0x01b3"})
    );

    // Bounded by the response size limit, streamed or not.
    let small = Dispatcher::builder(())
        .max_response_len(200)
        .too_large_code(eth::codes::RESPONSE_TOO_LARGE)
        .method("big", move |c: Call<'_, ()>| c.reply.data(&big))
        .method("mid", |c: Call<'_, ()>| c.reply.data(&[7u8; 120]))
        .build()
        .unwrap();
    for m in ["big", "mid"] {
        let mut out = Vec::new();
        let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
        small.handle(msg.as_bytes(), &mut Connection::new(), &mut out);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"]["code"], -32003, "{m}");
    }
}

/// The fixed-size writers (quantity, address, hash) write in place when
/// their longest form fits the limit and through a buffer when only the
/// value does: at every limit around the reply's size, the reply is the
/// same or a too-large error, the same in a `Vec` and a `BytesMut`, and
/// whole from the first limit that allows it on.
#[test]
fn fixed_size_writers_at_every_limit() {
    type Writer = fn(Call<'_, ()>) -> Result<rpcwire::dispatch::Done, RpcError>;
    let writers: [(&str, Writer); 5] = [
        ("q", |c| EthReply::quantity(c.reply, 0x1b4)),
        ("q_max", |c| EthReply::quantity(c.reply, u128::MAX)),
        ("q256", |c| c.reply.quantity_u256(U256::from(7u8) << 200)),
        ("addr", |c| c.reply.address(&Address::from([0xab; 20]))),
        ("hash", |c| c.reply.hash(&B256::from([0xcd; 32]))),
    ];
    let dispatcher = |limit: usize| {
        let mut b = Dispatcher::builder(()).max_response_len(limit);
        for (name, w) in writers {
            b = b.method(name, w);
        }
        b.build().unwrap()
    };
    // A long id: every reply passes the smallest response limit (128
    // bytes), so the limits below are the ones tried, not that floor.
    let id = "i".repeat(100);
    let msg = |m: &str| format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"{m}"}}"#);
    let roomy = dispatcher(1 << 20);
    for (name, _) in writers {
        let mut want = Vec::new();
        roomy.handle(msg(name).as_bytes(), &mut Connection::new(), &mut want);
        let v: Value = serde_json::from_slice(&want).unwrap();
        assert!(v["result"].is_string(), "{name}: {v}");
        let mut answered = 0;
        for limit in want.len() - 1..want.len() + 100 {
            let d = dispatcher(limit);
            let mut out = Vec::new();
            d.handle(msg(name).as_bytes(), &mut Connection::new(), &mut out);
            let mut framed = rpcwire::bytes::BytesMut::new();
            d.handle(msg(name).as_bytes(), &mut Connection::new(), &mut framed);
            assert_eq!(&framed[..], &out[..], "{name} at {limit}");
            if out == want {
                assert!(limit >= want.len());
                answered += 1;
            } else {
                let v: Value = serde_json::from_slice(&out).unwrap();
                assert_eq!(v["error"]["code"], -32000, "{name} at {limit}: {v}");
                assert_eq!(answered, 0, "{name} refused at {limit} after answering");
            }
        }
        assert!(answered > 0, "{name}");
        assert!(answered < 101, "{name} never refused");
    }
}

// ---- codes ----------------------------------------------------------------

#[test]
fn geth_codes() {
    use eth::codes;
    assert_eq!(
        (
            codes::SERVER_ERROR,
            codes::REQUEST_TIMEOUT,
            codes::RESPONSE_TOO_LARGE,
            codes::EXECUTION_REVERTED
        ),
        (-32000, -32002, -32003, 3)
    );
    assert_eq!(codes::request_timeout().code(), -32002);
    assert_eq!(
        codes::server_error("nonce too low").message(),
        "nonce too low"
    );
    // Error(string) "Ownable: caller is not the owner".
    let reason = "Ownable: caller is not the owner";
    let mut out = vec![0x08, 0xc3, 0x79, 0xa0];
    out.extend_from_slice(&U256::from(32u8).to_be_bytes::<32>());
    out.extend_from_slice(&U256::from(reason.len()).to_be_bytes::<32>());
    let mut padded = reason.as_bytes().to_vec();
    padded.resize(64, 0);
    out.extend_from_slice(&padded);
    let e = codes::execution_reverted(&out);
    assert_eq!(e.code(), 3);
    assert_eq!(e.message(), format!("execution reverted: {reason}"));
    assert_eq!(
        e.data().unwrap(),
        format!("\"{}\"", const_hex::encode_prefixed(&out))
    );
    // A custom error, an empty revert, truncated output: no reason.
    for output in [
        &[0x12, 0x34, 0x56, 0x78][..],
        &[],
        &out[..40],
        &out[..out.len() - 40],
    ] {
        let e = codes::execution_reverted(output);
        assert_eq!(e.message(), "execution reverted");
        assert_eq!(codes::revert_reason(output), None);
    }
    assert_eq!(codes::execution_reverted(&[]).data(), Some("\"0x\""));
    // Panic(uint256), as geth words it (execution-apis'
    // `call-revert-abi-panic`: "execution reverted: assert(false)").
    let panic = |code: U256| {
        let mut out = vec![0x4e, 0x48, 0x7b, 0x71];
        out.extend_from_slice(&code.to_be_bytes::<32>());
        codes::execution_reverted(&out)
    };
    for (code, reason) in [
        (U256::from(0x01), "assert(false)"),
        (U256::from(0x00), "generic panic"),
        (U256::from(0x11), "arithmetic underflow or overflow"),
        (U256::from(0x12), "division or modulo by zero"),
        (
            U256::from(0x32),
            "out-of-bounds access of an array or bytesN",
        ),
        (U256::from(0x51), "uninitialized function"),
        (U256::from(0x99), "unknown panic code: 0x99"),
        (U256::from(0x101), "unknown panic code: 0x101"),
        (
            U256::from(1) << 200,
            "unknown panic code: 0x100000000000000000000000000000000000000000000000000",
        ),
    ] {
        let e = panic(code);
        assert_eq!(e.message(), format!("execution reverted: {reason}"));
        assert_eq!(e.code(), 3);
    }
    // A panic selector without its whole word: no reason.
    assert_eq!(
        codes::execution_reverted(&[0x4e, 0x48, 0x7b, 0x71, 0, 1]).message(),
        "execution reverted"
    );
    // An Error(string) reason that is not UTF-8: kept, as geth keeps it
    // (its JSON shows U+FFFD for the bytes).
    let mut bad = out.clone();
    bad[4 + 64] = 0xff;
    assert_eq!(
        codes::execution_reverted(&bad).message(),
        "execution reverted: \u{fffd}wnable: caller is not the owner"
    );
    assert_eq!(codes::revert_reason(&bad), None);
    // Byte by byte, as Go's encoding/json: a cut sequence (E2 82) is two.
    let reason: &[u8] = &[b'a', 0xe2, 0x82, b'b'];
    let mut cut = vec![0x08, 0xc3, 0x79, 0xa0];
    cut.extend_from_slice(&U256::from(32).to_be_bytes::<32>());
    cut.extend_from_slice(&U256::from(reason.len()).to_be_bytes::<32>());
    let mut padded = reason.to_vec();
    padded.resize(32, 0);
    cut.extend_from_slice(&padded);
    assert_eq!(
        codes::execution_reverted(&cut).message(),
        "execution reverted: a\u{fffd}\u{fffd}b"
    );
}

// ---- catalogue ------------------------------------------------------------

#[test]
fn catalogue_round_trips_every_entry() {
    use eth::catalogue::{self, Access, BlockParam, Cache, METHODS, Namespace};
    assert!(METHODS.len() >= 100, "{}", METHODS.len());
    let mut names = std::collections::HashSet::new();
    for m in METHODS {
        assert!(names.insert(m.name), "{} twice", m.name);
        assert_eq!(catalogue::lookup(m.name), Some(m));
        assert_eq!(Namespace::of(m.name), Some(m.namespace));
        if let Some(p) = m.block.position() {
            assert!(p <= 2, "{}", m.name);
        }
    }
    assert_eq!(catalogue::lookup("eth_foo"), None);
    let expect: &[(&str, BlockParam, Cache, Access)] = &[
        ("eth_call", BlockParam::Id(1), Cache::ByBlock, Access::Read),
        (
            "eth_getBalance",
            BlockParam::Id(1),
            Cache::ByBlock,
            Access::Read,
        ),
        (
            "eth_getStorageAt",
            BlockParam::Id(2),
            Cache::ByBlock,
            Access::Read,
        ),
        (
            "eth_getProof",
            BlockParam::Id(2),
            Cache::ByBlock,
            Access::Read,
        ),
        (
            "eth_getBlockByNumber",
            BlockParam::Number(0),
            Cache::ByBlock,
            Access::Read,
        ),
        (
            "eth_getBlockByHash",
            BlockParam::Hash(0),
            Cache::ByBlock,
            Access::Read,
        ),
        (
            "eth_getLogs",
            BlockParam::Filter(0),
            Cache::ByBlock,
            Access::Read,
        ),
        // Not cacheable though they take a block (found by an audit of
        // the table): the window follows the head; fee and nonce defaults
        // come from the node's oracle and pool; rejected blocks are
        // forgotten.
        (
            "eth_feeHistory",
            BlockParam::Number(1),
            Cache::Never,
            Access::Read,
        ),
        (
            "eth_createAccessList",
            BlockParam::Id(1),
            Cache::Never,
            Access::Read,
        ),
        (
            "debug_traceBadBlock",
            BlockParam::Hash(0),
            Cache::Never,
            Access::Read,
        ),
        (
            "eth_getTransactionReceipt",
            BlockParam::None,
            Cache::ByTransaction,
            Access::Read,
        ),
        (
            "eth_blockNumber",
            BlockParam::None,
            Cache::Never,
            Access::Read,
        ),
        ("eth_chainId", BlockParam::None, Cache::Static, Access::Read),
        (
            "eth_sendRawTransaction",
            BlockParam::None,
            Cache::Never,
            Access::Write,
        ),
        (
            "eth_subscribe",
            BlockParam::None,
            Cache::Never,
            Access::Subscription,
        ),
        (
            "eth_newFilter",
            BlockParam::Filter(0),
            Cache::Never,
            Access::Filter,
        ),
        (
            "eth_getFilterChanges",
            BlockParam::None,
            Cache::Never,
            Access::Filter,
        ),
        ("eth_sign", BlockParam::None, Cache::Never, Access::Account),
        (
            "debug_traceTransaction",
            BlockParam::None,
            Cache::ByTransaction,
            Access::Read,
        ),
        (
            "debug_traceCall",
            BlockParam::Id(1),
            Cache::ByBlock,
            Access::Read,
        ),
        (
            "trace_call",
            BlockParam::Id(2),
            Cache::ByBlock,
            Access::Read,
        ),
        (
            "trace_filter",
            BlockParam::Filter(0),
            Cache::ByBlock,
            Access::Read,
        ),
        (
            "txpool_content",
            BlockParam::None,
            Cache::Never,
            Access::Read,
        ),
        ("net_version", BlockParam::None, Cache::Static, Access::Read),
        ("web3_sha3", BlockParam::None, Cache::Static, Access::Read),
    ];
    for (name, block, cache, access) in expect {
        let m = catalogue::lookup(name).unwrap();
        assert_eq!(
            (m.block, m.cache, m.access),
            (*block, *cache, *access),
            "{name}"
        );
    }
    // Every method of the benchmark's traffic mix is in the catalogue.
    for (name, _) in corpus::ETH_MIX {
        assert!(catalogue::lookup(name).is_some(), "{name}");
    }
}

// ---- the fused readers ------------------------------------------------------

/// What a reader returned, comparable across the two paths: the value's
/// debug text, or the error's reason, parameter, position and field.
fn seen<T: std::fmt::Debug>(r: Result<T, eth::Invalid<'_>>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!(
            "err {} {:?} {:?} {:?} {:?}",
            e.reason(),
            e.param(),
            e.position(),
            e.field(),
            e.received()
        ),
    }
}

/// Reads `params` with the fused `next_*` readers and with
/// `required`/`optional` and the value decoders: the two must agree.
fn assert_fused_agrees(params: &str) {
    with_params(params, |p| {
        let arena = bumpalo::Bump::new();
        type Step = for<'x> fn(&mut EthParams<'x>, &bumpalo::Bump) -> String;
        let fused: [Step; 6] = [
            |p, a| seen(p.next_bytes_in("d", a).map(<[u8]>::to_vec)),
            |p, _| seen(p.next_address("a")),
            |p, _| seen(p.next_hash("h")),
            |p, _| seen(p.next_block_id("b")),
            |p, a| {
                seen(
                    p.next_call_request("c")
                        .map(|c| (c.as_json(), c.input_in(a).map(|i| i.map(<[u8]>::to_vec)))),
                )
            },
            |p, _| {
                seen(p.next_log_filter("f").map(|f| {
                    (
                        f.as_json(),
                        f.from_block(),
                        f.addresses().map(|a| a.count()),
                    )
                }))
            },
        ];
        let general: [Step; 6] = [
            |p, a| {
                seen(
                    p.required("d")
                        .and_then(|v| v.bytes_in(a))
                        .map(<[u8]>::to_vec),
                )
            },
            |p, _| seen(p.required("a").and_then(|v| v.address())),
            |p, _| seen(p.required("h").and_then(|v| v.hash())),
            |p, _| seen(p.optional("b").map(|v| v.block_id()).transpose()),
            |p, a| {
                seen(
                    p.required("c")
                        .and_then(|v| v.call_request())
                        .map(|c| (c.as_json(), c.input_in(a).map(|i| i.map(<[u8]>::to_vec)))),
                )
            },
            |p, _| {
                seen(p.required("f").and_then(|v| v.log_filter()).map(|f| {
                    (
                        f.as_json(),
                        f.from_block(),
                        f.addresses().map(|a| a.count()),
                    )
                }))
            },
        ];
        // Every reader at every position, then the rest read in order: the
        // walk must continue at the same place after either.
        let n = p.len();
        for first in 0..n {
            for (i, (f, g)) in fused.iter().zip(&general).enumerate() {
                let (mut a, mut b) = (EthParams::new(Some(p)), EthParams::new(Some(p)));
                for _ in 0..first {
                    let _ = a.optional("skip");
                    let _ = b.optional("skip");
                }
                let got = f(&mut a, &arena);
                assert_eq!(got, g(&mut b, &arena), "{params} reader {i} at {first}");
                // After a value, the walk goes on from the same place (after
                // an error, where a reader stands is unspecified).
                if got.starts_with("ok") {
                    let rest_a: Vec<_> =
                        std::iter::from_fn(|| a.optional("r").map(|v| v.value())).collect();
                    let rest_b: Vec<_> =
                        std::iter::from_fn(|| b.optional("r").map(|v| v.value())).collect();
                    assert_eq!(rest_a, rest_b, "{params} reader {i} at {first}: the rest");
                }
            }
        }
    });
}

#[test]
fn fused_readers_agree_with_the_general_path() {
    let h = "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b";
    let a = "0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97";
    for params in [
        format!(r#"["{a}","latest"]"#),
        format!(r#"[ "{a}" , "pending" ]"#),
        format!(r#"["{a}","0x0"]"#),
        format!(r#"["{a}","0x01"]"#),
        format!(r#"["{a}","0x"]"#),
        format!(r#"["{a}","0x10000000000000000"]"#),
        format!(r#"["{a}","Latest"]"#),
        format!(r#"["{a}","{h}"]"#),
        format!(r#"["{a}",{{"blockHash":"{h}","requireCanonical":true}}]"#),
        format!(r#"["{a}",{{"blockNumber":"0x1b4"}}]"#),
        format!(r#"["{a}",{{"blockNumber":"0x1b4","blockHash":"{h}"}}]"#),
        format!(r#"["{a}",{{"blockNumber":"0x01"}}]"#),
        format!(r#"["{a}",{{}}]"#),
        format!(r#"["{a}",null]"#),
        format!(r#"["{a}"]"#),
        format!(r#"["{}","safe"]"#, a.to_uppercase().replace("0X", "0x")),
        format!(r#"["{}","finalized"]"#, &a[..40]),
        format!(r#"["{a}00","earliest"]"#),
        format!(r#"["\u0030x{}","latest"]"#, &a[2..]),
        format!(r#"["{}\"","latest"]"#, &a[..41]),
        format!(r#"["{h}","{a}"]"#),
        format!(r#"[{{"to":"{a}","data":"0x70a08231","gas":"0x5208"}},"latest"]"#),
        format!(r#"[{{"to":"{a}","to":"{a}"}},"latest"]"#),
        r#"[{"input":"0x01","data":"0x02"}, {"blockNumber":"0x2"}]"#.to_string(),
        format!(r#"[{{"fromBlock":"0x1","toBlock":"latest","address":["{a}"]}}]"#),
        format!(r#"[{{"blockHash":"{h}","fromBlock":"0x1"}}]"#),
        r#"[{"fromBlock":"0x01"}, 5]"#.to_string(),
        r#"[]"#.to_string(),
        r#"["0x", "0x00ff", "0xABCD"]"#.to_string(),
        r#"["0xabc", "0x0x12", "0xzz", "00", "0x\u0030\u0030"]"#.to_string(),
        r#"["0x12\"34", "0x1\"34", "0x12"]"#.to_string(),
        r#"[null, null]"#.to_string(),
        r#"[5, true, "x", [1], {"a":{"b":"}"}}]"#.to_string(),
    ] {
        assert_fused_agrees(&params);
    }
    for (k, method) in eth_params::METHODS.iter().enumerate() {
        for msg in eth_params::messages(method, 0xf00 + k as u64, 300) {
            let v: Value = serde_json::from_slice(&msg).unwrap();
            assert_fused_agrees(&serde_json::to_string(&v["params"]).unwrap());
        }
    }
}

/// `debug_getModifiedAccountsByNumber` takes plain JSON numbers (geth:
/// `startNum uint64, endNum *uint64`) and its result depends on the range's
/// end: the catalogue names no block parameter for it (it once named
/// position 0, which a block-number decoder refuses, and called the result
/// cacheable by that block).
#[test]
fn the_catalogue_names_no_block_for_a_range_of_plain_numbers() {
    let m = rpcwire::eth::catalogue::lookup("debug_getModifiedAccountsByNumber").unwrap();
    assert!(m.block.position().is_none(), "{:?}", m.block);
}

/// A fused reader (`next_*`) that refuses a value consumes it, as
/// `required` and `optional` do: what the handler reads next, and
/// `finish`'s verdict, do not depend on which reader refused.
#[test]
fn refused_values_are_consumed_by_every_reader() {
    type Reader = fn(&mut EthParams<'_>) -> Result<(), &'static str>;
    let cases: [(&str, Reader); 3] = [
        (r#"{"to":"0x1","to":"0x2"}"#, |p| {
            outcome(p.next_call_request("c").map(|_| ()))
        }),
        (
            r#"{"blockHash":"0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b","fromBlock":"0x1"}"#,
            |p| outcome(p.next_log_filter("f").map(|_| ())),
        ),
        (r#"{"blockNumber":"0x1","blockHash":"0x1"}"#, |p| {
            outcome(p.next_block_id("b").map(|_| ()))
        }),
    ];
    for (first, fused_reader) in cases {
        with_params(&format!(r#"[{first},"latest","safe"]"#), |params| {
            let mut fused = EthParams::new(Some(params));
            let mut general = EthParams::new(Some(params));
            assert!(fused_reader(&mut fused).is_err(), "{first}");
            general.optional("v");
            assert_eq!(
                outcome(fused.next_block_id("b")),
                Ok(Some(BlockId::Tag(eth::BlockTag::Latest))),
                "{first}"
            );
            // The general reader reads the same value next.
            let general_next = general.optional("b").map(|b| b.block_id()).transpose();
            assert_eq!(
                outcome(general_next),
                Ok(Some(BlockId::Tag(eth::BlockTag::Latest))),
                "{first}"
            );
            assert_eq!(outcome(fused.finish()), Err("too many params"), "{first}");
            assert_eq!(outcome(general.finish()), Err("too many params"), "{first}");
        });
    }
}
