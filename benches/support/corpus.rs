//! Benchmark and test corpus built from DESIGN.md's "Real traffic" section.
//!
//! Everything is generated from a fixed seed, so every run (and every peer in
//! a run) sees the same bytes. Shapes follow what real clients put on the
//! wire: viem (compact, `jsonrpc` first, no `params` for no-argument calls, ids
//! from 0), ethers v6 (`method` first, `jsonrpc` last, `"params":[]`), web3.py
//! (`": "` and `", "` separators), web3.js (UUID string ids) and indexers
//! (numeric ids above 2^53).
#![allow(dead_code)]

/// The client whose serialisation style a message imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Viem,
    Ethers,
    Web3Py,
}

/// xorshift64*: tiny, deterministic, good enough to pick methods and fill hex.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn hex(&mut self, digits: usize) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(digits + 2);
        s.push_str("0x");
        for _ in 0..digits {
            s.push(HEX[self.below(16) as usize] as char);
        }
        s
    }
    pub fn address(&mut self) -> String {
        self.hex(40)
    }
    pub fn hash(&mut self) -> String {
        self.hex(64)
    }
    pub fn quantity(&mut self, max: u64) -> String {
        format!("0x{:x}", self.below(max))
    }
}

/// Method mix of a public Ethereum endpoint, weights in percent (DESIGN.md).
pub const ETH_MIX: &[(&str, u64)] = &[
    ("eth_call", 45),
    ("eth_getTransactionReceipt", 12),
    ("eth_getBalance", 8),
    ("eth_blockNumber", 8),
    ("eth_getBlockByNumber", 6),
    ("eth_getTransactionCount", 5),
    ("eth_chainId", 4),
    ("eth_getTransactionByHash", 3),
    ("eth_getLogs", 3),
    ("eth_getCode", 2),
    ("eth_estimateGas", 2),
    ("eth_sendRawTransaction", 2),
];

fn pick_method(rng: &mut Rng) -> &'static str {
    let total: u64 = ETH_MIX.iter().map(|(_, w)| w).sum();
    let mut roll = rng.below(total);
    for (name, weight) in ETH_MIX {
        if roll < *weight {
            return name;
        }
        roll -= weight;
    }
    unreachable!()
}

fn block_tag(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => "\"pending\"".into(),
        1 => "\"safe\"".into(),
        2 => format!("\"{}\"", rng.quantity(30_000_000)),
        _ => "\"latest\"".into(),
    }
}

/// The params array of `method`, compact, or `None` for a no-argument call.
fn eth_params(rng: &mut Rng, method: &str) -> Option<String> {
    let s = |v: String| format!("\"{v}\"");
    Some(match method {
        "eth_call" => {
            // selector + 1..4 ABI words, sometimes with `from`.
            let words = 1 + rng.below(4) as usize;
            let data = rng.hex(8 + 64 * words);
            let to = rng.address();
            if rng.below(4) == 0 {
                let from = rng.address();
                format!(
                    "[{{\"from\":\"{from}\",\"to\":\"{to}\",\"data\":\"{data}\"}},{}]",
                    block_tag(rng)
                )
            } else {
                format!(
                    "[{{\"to\":\"{to}\",\"data\":\"{data}\"}},{}]",
                    block_tag(rng)
                )
            }
        }
        "eth_getTransactionReceipt" | "eth_getTransactionByHash" => format!("[{}]", s(rng.hash())),
        "eth_getBalance" | "eth_getTransactionCount" | "eth_getCode" => {
            format!("[{},{}]", s(rng.address()), block_tag(rng))
        }
        "eth_blockNumber" | "eth_chainId" => return None,
        "eth_getBlockByNumber" => format!(
            "[{},{}]",
            s(rng.quantity(30_000_000)),
            if rng.below(2) == 0 { "false" } else { "true" }
        ),
        "eth_getLogs" => {
            let from = 20_000_000 + rng.below(1_000_000);
            format!(
                "[{{\"fromBlock\":\"0x{from:x}\",\"toBlock\":\"0x{:x}\",\"address\":\"{}\",\"topics\":[\"{}\",null,\"{}\"]}}]",
                from + rng.below(2_000),
                rng.address(),
                rng.hash(),
                rng.hash()
            )
        }
        "eth_estimateGas" => format!(
            "[{{\"from\":\"{}\",\"to\":\"{}\",\"value\":\"{}\",\"data\":\"{}\"}}]",
            rng.address(),
            rng.address(),
            rng.quantity(1 << 60),
            rng.hex(8 + 128)
        ),
        "eth_sendRawTransaction" => {
            let len = 300 + rng.below(700) as usize;
            format!("[{}]", s(rng.hex(len & !1)))
        }
        other => panic!("no params shape for {other}"),
    })
}

/// Re-spaces compact JSON the way Python's `json.dumps` does (`": "`, `", "`).
fn python_spacing(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() + compact.len() / 8);
    let mut in_string = false;
    let mut escaped = false;
    for c in compact.chars() {
        out.push(c);
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if c == ':' || c == ',' {
            out.push(' ');
        }
    }
    out
}

fn uuid(rng: &mut Rng) -> String {
    let h = rng.hex(32);
    let h = &h[2..];
    format!(
        "\"{}-{}-4{}-a{}-{}\"",
        &h[..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// One Ethereum request in `style`; `id` is the JSON text of its id.
pub fn eth_request(rng: &mut Rng, style: Style, id: &str) -> String {
    let method = pick_method(rng);
    let params = eth_params(rng, method);
    match style {
        Style::Viem => match params {
            Some(p) => format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\",\"params\":{p}}}"
            ),
            None => format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"}}"),
        },
        Style::Ethers => {
            let p = params.unwrap_or_else(|| "[]".into());
            format!("{{\"method\":\"{method}\",\"params\":{p},\"id\":{id},\"jsonrpc\":\"2.0\"}}")
        }
        Style::Web3Py => {
            let p = params.unwrap_or_else(|| "[]".into());
            python_spacing(&format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"{method}\",\"params\":{p},\"id\":{id}}}"
            ))
        }
    }
}

/// `n` single Ethereum requests in one client style, ids as that client
/// numbers them (viem from 0, ethers from 1, web3.py from 1; every fifth
/// web3.py-style message uses a UUID id as web3.js does, every seventh viem
/// one an indexer's id above 2^53).
pub fn eth_singles(seed: u64, style: Style, n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let id = match style {
                Style::Viem if i % 7 == 6 => format!("{}", (1u64 << 53) + rng.below(1 << 40)),
                Style::Viem => i.to_string(),
                Style::Web3Py if i % 5 == 4 => uuid(&mut rng),
                _ => (i + 1).to_string(),
            };
            eth_request(&mut rng, style, &id).into_bytes()
        })
        .collect()
}

/// A batch of `n` Ethereum requests, as viem (`n` up to 1000) or ethers (up
/// to 100) sends it.
pub fn eth_batch(seed: u64, style: Style, n: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = String::from("[");
    for i in 0..n {
        if i > 0 {
            out.push_str(if style == Style::Web3Py { ", " } else { "," });
        }
        out.push_str(&eth_request(&mut rng, style, &i.to_string()));
    }
    out.push(']');
    out.into_bytes()
}

/// `eth_sendRawTransaction` carrying a blob-sized payload: about `size` bytes.
pub fn eth_big_raw_tx(seed: u64, size: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let head = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_sendRawTransaction\",\"params\":[\"";
    let tail = "\"]}";
    let digits = (size - head.len() - tail.len() - 2) & !1;
    let hex = rng.hex(digits);
    format!("{head}{hex}{tail}").into_bytes()
}

/// MCP `tools/call` requests (2025-06-18 shape), one per line on stdio.
pub fn mcp_tool_calls(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    const CITIES: &[&str] = &["San Francisco, CA", "Zürich", "東京", "São Paulo", "Kraków"];
    (0..n)
        .map(|i| {
            let msg = match rng.below(4) {
                0 => format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/call\",\"params\":{{\"name\":\"get_weather\",\"arguments\":{{\"location\":\"{}\",\"units\":\"metric\"}},\"_meta\":{{\"progressToken\":{i}}}}}}}",
                    CITIES[rng.below(CITIES.len() as u64) as usize]
                ),
                1 => format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":\"req-{i}\",\"method\":\"tools/call\",\"params\":{{\"name\":\"search_files\",\"arguments\":{{\"query\":\"fn main\\n\\\"quoted\\\" path\\\\to\",\"max_results\":{},\"include\":[\"*.rs\",\"*.toml\"]}}}}}}",
                    1 + rng.below(100)
                ),
                2 => format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"resources/read\",\"params\":{{\"uri\":\"file:///home/user/project/src/{}.rs\"}}}}",
                    rng.hex(8)
                ),
                _ => format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/call\",\"params\":{{\"name\":\"run_sql\",\"arguments\":{{\"sql\":\"SELECT id, name FROM users WHERE created_at > '2025-01-01' ORDER BY id LIMIT {}\",\"read_only\":true,\"timeout_ms\":1.5e3}}}}}}",
                    rng.below(1000)
                ),
            };
            msg.into_bytes()
        })
        .collect()
}
