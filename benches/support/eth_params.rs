//! Ethereum params as real clients write them, for the `eth` benchmark and
//! tests: `eth_call`, `eth_getLogs`, `eth_getBalance` and
//! `eth_sendRawTransaction` requests in the styles of viem (compact, `data`
//! before `to`, lowercase hex), ethers v6 (`method` first, `jsonrpc` last,
//! lowercase hex) and web3.py (`": "` / `", "` separators, EIP-55
//! checksummed addresses), web3.js (UUID ids), indexers (ids above 2^53)
//! and scripts (members sorted, some pretty-printed), mixed in one stream
//! in the shares of the singles' corpus.
//!
//! Deterministic (a fixed seed gives the same bytes), and every message is
//! distinct. Needs `super::corpus` (`Rng`, `Style`) and alloy-primitives
//! (EIP-55 checksums).
#![allow(dead_code)]

use super::corpus::{Rng, SINGLE_CLIENTS, Style};

/// The four methods the benchmark decodes.
pub const METHODS: [&str; 4] = [
    "eth_call",
    "eth_getLogs",
    "eth_getBalance",
    "eth_sendRawTransaction",
];

/// The client of the next message, in the shares of the singles' corpus
/// ([`SINGLE_CLIENTS`]): scripts' sorted and pretty-printed messages
/// included, shapes off the decoders' straight-line readers.
fn style_of(rng: &mut Rng) -> Style {
    rng.pick(SINGLE_CLIENTS)
}

/// An address as the style writes it: lowercase, or EIP-55 for web3.py.
fn address(rng: &mut Rng, style: Style) -> String {
    let mut bytes = [0u8; 20];
    for b in &mut bytes {
        *b = rng.below(256) as u8;
    }
    // Popular contracts have leading zero bytes now and then.
    if rng.below(8) == 0 {
        bytes[0] = 0;
    }
    let a = alloy_primitives::Address::from(bytes);
    match style {
        Style::Web3Py => a.to_checksum(None),
        _ => format!("{a:#x}"),
    }
}

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

fn quantity(rng: &mut Rng, max: u64) -> String {
    format!("0x{:x}", rng.below(max))
}

/// A block parameter as each client sends it for a state read.
fn block(rng: &mut Rng) -> String {
    match rng.below(20) {
        0..=11 => "\"latest\"".into(),
        12 => "\"pending\"".into(),
        13 => "\"safe\"".into(),
        14 => "\"finalized\"".into(),
        15 => format!("{{\"blockHash\":\"{}\"}}", rng.hash()),
        16 => format!(
            "{{\"blockHash\":\"{}\",\"requireCanonical\":true}}",
            rng.hash()
        ),
        17 => format!("{{\"blockNumber\":\"{}\"}}", quantity(rng, 22_000_000)),
        _ => quoted(&format!("0x{:x}", 18_000_000 + rng.below(4_000_000))),
    }
}

/// ABI call data: a selector and `words` 32-byte words.
fn calldata(rng: &mut Rng, words: usize) -> String {
    let mut s = rng.hex(8);
    for _ in 0..words {
        // Arguments are mostly addresses and small numbers: zero-padded.
        match rng.below(3) {
            0 => {
                s.push_str(&"0".repeat(24));
                s.push_str(&rng.hex(40)[2..]);
            }
            1 => {
                let digits = 1 + rng.below(20) as usize;
                s.push_str(&"0".repeat(64 - digits));
                s.push_str(&rng.hex(digits)[2..]);
            }
            _ => s.push_str(&rng.hex(64)[2..]),
        }
    }
    s
}

fn call_params(rng: &mut Rng, style: Style) -> String {
    let to = address(rng, style);
    let words = match rng.below(10) {
        0..=3 => 1,
        4..=6 => 2,
        7 | 8 => 3 + rng.below(3) as usize,
        // Multicall3 `aggregate3`: large call data.
        _ => 20 + rng.below(100) as usize,
    };
    let data = calldata(rng, words);
    let from = (rng.below(4) == 0).then(|| address(rng, style));
    // Wallets estimating or simulating a transaction send fees and gas.
    let wallet = rng.below(6) == 0;
    let mut members: Vec<(&str, String)> = Vec::new();
    let data_name = if rng.below(25) == 0 { "input" } else { "data" };
    match style {
        // viem: formatTransactionRequest's order (data, from, gas, …, to, value).
        Style::Viem => {
            members.push((data_name, data));
            if let Some(f) = from {
                members.push(("from", f));
            }
            if wallet {
                members.push(("gas", quantity(rng, 3_000_000)));
                members.push(("maxFeePerGas", quantity(rng, 200_000_000_000)));
                members.push(("maxPriorityFeePerGas", quantity(rng, 3_000_000_000)));
                members.push(("nonce", quantity(rng, 5_000)));
            }
            members.push(("to", to));
            if wallet {
                members.push(("value", quantity(rng, 1 << 62)));
            }
        }
        // ethers v6 / web3.py: `to` first, then `from`, `data`.
        _ => {
            if wallet {
                members.push(("gas", quantity(rng, 3_000_000)));
                if rng.below(2) == 0 {
                    members.push(("gasPrice", quantity(rng, 200_000_000_000)));
                } else {
                    members.push(("maxFeePerGas", quantity(rng, 200_000_000_000)));
                    members.push(("maxPriorityFeePerGas", quantity(rng, 3_000_000_000)));
                }
            }
            members.push(("to", to));
            if let Some(f) = from {
                members.push(("from", f));
            }
            members.push((data_name, data));
            if wallet {
                members.push(("value", quantity(rng, 1 << 62)));
                members.push(("nonce", quantity(rng, 5_000)));
            }
        }
    }
    let object: Vec<String> = members
        .into_iter()
        .map(|(k, v)| format!("\"{k}\":\"{v}\""))
        .collect();
    format!("[{{{}}},{}]", object.join(","), block(rng))
}

fn topic_position(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=5 => quoted(&rng.hash()),
        6 | 7 => "null".into(),
        _ => {
            let n = 2 + rng.below(3);
            let alts: Vec<String> = (0..n).map(|_| quoted(&rng.hash())).collect();
            format!("[{}]", alts.join(","))
        }
    }
}

fn logs_params(rng: &mut Rng, style: Style) -> String {
    let address = match rng.below(10) {
        0..=6 => quoted(&address(rng, style)),
        7 | 8 => {
            let n = 2 + rng.below(4);
            let list: Vec<String> = (0..n).map(|_| quoted(&address(rng, style))).collect();
            format!("[{}]", list.join(","))
        }
        _ => String::new(),
    };
    let positions = 1 + rng.below(4);
    let mut topics: Vec<String> = vec![quoted(&rng.hash())];
    for _ in 1..positions {
        topics.push(topic_position(rng));
    }
    // Trailing nulls are trimmed by clients.
    while topics.last().is_some_and(|t| t == "null") {
        topics.pop();
    }
    let topics = format!("[{}]", topics.join(","));
    let from = 18_000_000 + rng.below(4_000_000);
    let range: Vec<(&str, String)> = match rng.below(12) {
        0 => vec![("blockHash", quoted(&rng.hash()))],
        1 => vec![
            ("fromBlock", quoted(&format!("0x{from:x}"))),
            ("toBlock", "\"latest\"".into()),
        ],
        2 => vec![("fromBlock", quoted(&format!("0x{from:x}")))],
        _ => vec![
            ("fromBlock", quoted(&format!("0x{from:x}"))),
            (
                "toBlock",
                quoted(&format!("0x{:x}", from + rng.below(10_000))),
            ),
        ],
    };
    let mut members: Vec<(&str, String)> = Vec::new();
    let with_address = |m: &mut Vec<(&str, String)>| {
        if !address.is_empty() {
            m.push(("address", address.clone()));
        }
    };
    match style {
        // viem: address, topics, then the range.
        Style::Viem => {
            with_address(&mut members);
            members.push(("topics", topics));
            members.extend(range);
        }
        // ethers v6 / web3.py: the range first.
        _ => {
            members.extend(range);
            with_address(&mut members);
            members.push(("topics", topics));
        }
    }
    let object: Vec<String> = members
        .into_iter()
        .map(|(k, v)| format!("\"{k}\":{v}"))
        .collect();
    format!("[{{{}}}]", object.join(","))
}

fn balance_params(rng: &mut Rng, style: Style) -> String {
    format!("[{},{}]", quoted(&address(rng, style)), block(rng))
}

fn raw_tx_params(rng: &mut Rng) -> String {
    let bytes = match rng.below(20) {
        // Transfers and approvals.
        0..=11 => 110 + rng.below(60),
        // Swaps and other contract calls.
        12..=18 => 250 + rng.below(900),
        // Deployments.
        _ => 2_000 + rng.below(6_000),
    } as usize;
    let prefix = if rng.below(5) == 0 { "0xf8" } else { "0x02f8" };
    let digits = 2 * bytes - (prefix.len() - 2);
    format!("[\"{prefix}{}\"]", &rng.hex(digits)[2..])
}

/// The params array of `method`, compact.
pub fn params(rng: &mut Rng, method: &str, style: Style) -> String {
    match method {
        "eth_call" => call_params(rng, style),
        "eth_getLogs" => logs_params(rng, style),
        "eth_getBalance" => balance_params(rng, style),
        "eth_sendRawTransaction" => raw_tx_params(rng),
        other => panic!("no params shape for {other}"),
    }
}

/// Re-spaces compact JSON as Python's `json.dumps` does (`": "`, `", "`).
pub fn python_spacing(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() + compact.len() / 8);
    let mut in_string = false;
    for c in compact.chars() {
        out.push(c);
        if c == '"' {
            in_string = !in_string;
        } else if !in_string && (c == ':' || c == ',') {
            out.push(' ');
        }
    }
    out
}

/// `n` distinct `method` requests, client styles mixed in one stream.
pub fn messages(method: &str, seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let style = style_of(&mut rng);
            let p = params(&mut rng, method, style);
            let msg = match style {
                Style::Viem => format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"{method}\",\"params\":{p}}}"
                ),
                Style::Ethers => format!(
                    "{{\"method\":\"{method}\",\"params\":{p},\"id\":{},\"jsonrpc\":\"2.0\"}}",
                    i + 1
                ),
                Style::Web3Py => python_spacing(&format!(
                    "{{\"jsonrpc\":\"2.0\",\"method\":\"{method}\",\"params\":{p},\"id\":{}}}",
                    i + 1
                )),
                Style::Web3Js => format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":\"{i:08x}-0000-4000-8000-000000000000\",\"method\":\"{method}\",\"params\":{p}}}"
                ),
                Style::Indexer => format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{method}\",\"params\":{p}}}",
                    (1u64 << 53) + i as u64
                ),
                // Go maps and Python's `sort_keys`: every object's members
                // sorted (serde_json's map sorts them), one message in four
                // pretty-printed over lines.
                Style::Scripted => {
                    let value: serde_json::Value = serde_json::from_str(&format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{method}\",\"params\":{p}}}",
                        i + 1
                    ))
                    .unwrap();
                    if rng.chance(1, 4) {
                        serde_json::to_string_pretty(&value).unwrap() + "\n"
                    } else {
                        value.to_string()
                    }
                }
            };
            msg.into_bytes()
        })
        .collect()
}
