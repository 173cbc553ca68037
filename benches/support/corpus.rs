//! Benchmark and test corpora built from DESIGN.md's "Real traffic" section.
//!
//! Everything is generated from fixed seeds, so every run (and every peer in
//! a run) sees the same bytes. The large corpora are streams as a gateway
//! receives them: many client sessions interleaved, each writing its messages
//! the way its library does, every message distinct (ids advance, hex is
//! random), so that neither the caches nor the branch predictor can learn
//! them. The clients:
//!
//! * viem: compact, `jsonrpc` first, no `params` for no-argument calls, ids
//!   from 0;
//! * ethers v6: `method` first (some sessions `id` first), `"params":[]`,
//!   `jsonrpc` last, ids from 1, checksummed addresses;
//! * web3.py: `json.dumps` separators (`": "`, `", "`), ids from 0;
//! * web3.js: UUID string ids;
//! * indexers: numeric ids above 2^53, their own method mix (logs, blocks,
//!   receipts), calls pinned to block numbers;
//! * scripts and ad-hoc tools (Go's `map[string]any`, Python's
//!   `sort_keys`, `jq`): members sorted (`id`, `jsonrpc`, `method`,
//!   `params`), one in four pretty-printed over lines with a trailing
//!   newline: shapes off rpcwire's straight-line paths, 5% of the traffic.
//!
//! Small "hot" corpora (the last few hundred messages of a stream, replayed)
//! exist only to show how much a repeated corpus flatters a parser.
#![allow(dead_code)]

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

/// The client whose serialisation style a message imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Style {
    Viem,
    Ethers,
    Web3Py,
    Web3Js,
    Indexer,
    Scripted,
}

impl Style {
    pub const ALL: [Style; 6] = [
        Style::Viem,
        Style::Ethers,
        Style::Web3Py,
        Style::Web3Js,
        Style::Indexer,
        Style::Scripted,
    ];
}

/// Share of each client among single requests at a public gateway, percent.
pub const SINGLE_CLIENTS: &[(Style, u64)] = &[
    (Style::Viem, 32),
    (Style::Ethers, 23),
    (Style::Web3Py, 12),
    (Style::Web3Js, 13),
    (Style::Indexer, 15),
    (Style::Scripted, 5),
];

/// Clients of successive batches (a batch comes from one client): 6 viem, 6
/// ethers, 2 web3.py, 2 web3.js, 3 indexers and a script in every 20,
/// interleaved.
pub const BATCH_CLIENTS: [Style; 20] = {
    use Style::*;
    [
        Viem, Ethers, Indexer, Viem, Web3Py, Ethers, Viem, Web3Js, Ethers, Indexer, Scripted,
        Ethers, Viem, Web3Py, Ethers, Viem, Indexer, Web3Js, Ethers, Viem,
    ]
};

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
    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
    /// A value of `table`, with probability proportional to its weight.
    pub fn pick<T: Copy>(&mut self, table: &[(T, u64)]) -> T {
        let total: u64 = table.iter().map(|(_, w)| w).sum();
        let mut roll = self.below(total);
        for (value, weight) in table {
            if roll < *weight {
                return *value;
            }
            roll -= weight;
        }
        unreachable!()
    }
    pub fn one_of<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
    /// `0x` and `digits` lowercase hex digits.
    pub fn hex(&mut self, digits: usize) -> String {
        let mut s = String::with_capacity(digits + 2);
        s.push_str("0x");
        self.push_hex(&mut s, digits);
        s
    }
    fn push_hex(&mut self, s: &mut String, digits: usize) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut bits = 0u64;
        for i in 0..digits {
            if i % 16 == 0 {
                bits = self.next_u64();
            }
            s.push(HEX[(bits & 15) as usize] as char);
            bits >>= 4;
        }
    }
    pub fn address(&mut self) -> String {
        self.hex(40)
    }
    /// An address with EIP-55-like mixed case, as ethers and web3.py send.
    pub fn checksummed(&mut self) -> String {
        let mut a = self.address().into_bytes();
        let bits = self.next_u64();
        for (i, c) in a[2..].iter_mut().enumerate() {
            if c.is_ascii_alphabetic() && bits >> (i % 64) & 1 == 1 {
                c.make_ascii_uppercase();
            }
        }
        String::from_utf8(a).unwrap()
    }
    pub fn hash(&mut self) -> String {
        self.hex(64)
    }
    pub fn quantity(&mut self, max: u64) -> String {
        format!("0x{:x}", self.below(max))
    }
}

/// The method mix of a public Ethereum endpoint, weights per mille
/// (DESIGN.md: `eth_call` 40-50%, receipts about 12%, about ten methods carry
/// 95%). Every method of every corpus is in this list, so registering it
/// answers all of them.
pub const ETH_MIX: &[(&str, u64)] = &[
    ("eth_call", 470),
    ("eth_getTransactionReceipt", 110),
    ("eth_blockNumber", 75),
    ("eth_getBalance", 65),
    ("eth_chainId", 50),
    ("eth_getBlockByNumber", 45),
    ("eth_getTransactionCount", 40),
    ("eth_getTransactionByHash", 30),
    ("eth_getLogs", 25),
    ("eth_getCode", 20),
    ("eth_estimateGas", 18),
    ("eth_sendRawTransaction", 12),
    ("eth_gasPrice", 12),
    ("net_version", 8),
    ("eth_maxPriorityFeePerGas", 6),
    ("eth_feeHistory", 5),
    ("eth_getBlockByHash", 5),
    ("eth_getStorageAt", 4),
];

/// What an indexer asks for, per mille.
pub const INDEXER_MIX: &[(&str, u64)] = &[
    ("eth_getLogs", 300),
    ("eth_getTransactionReceipt", 250),
    ("eth_getBlockByNumber", 200),
    ("eth_call", 150),
    ("eth_blockNumber", 100),
];

/// A hash of `bytes`, to keep corpora free of repeated messages.
fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Remembers what was generated; `insert` is false for a repeat.
#[derive(Default)]
struct Distinct(HashSet<u64>);

impl Distinct {
    fn insert(&mut self, msg: &[u8]) -> bool {
        self.0.insert(fingerprint(msg))
    }
}

/// One client session: its library's style and its id counter.
struct Client {
    style: Style,
    next_id: u64,
    /// ethers: some code paths write `id` first.
    id_first: bool,
    /// indexers: a random 64-bit id per request instead of a counter.
    random_ids: bool,
}

impl Client {
    fn new(rng: &mut Rng, style: Style) -> Self {
        // Half the sessions are fresh, half have been running for a while.
        let start = match style {
            Style::Viem | Style::Web3Py => 0,
            _ => 1,
        };
        let next_id = match style {
            Style::Indexer => (1 << 53) + rng.below(1 << 40),
            _ if rng.chance(1, 2) => start,
            _ => start + rng.below(2_000_000),
        };
        Client {
            style,
            next_id,
            id_first: style == Style::Ethers && rng.chance(1, 3),
            random_ids: style == Style::Indexer && rng.chance(1, 2),
        }
    }

    /// The JSON text of the next id.
    fn id(&mut self, rng: &mut Rng) -> String {
        if self.style == Style::Web3Js {
            return uuid(rng);
        }
        if self.random_ids {
            return ((1u64 << 53) + rng.below(u64::MAX - (1 << 53))).to_string();
        }
        self.next_id += 1;
        (self.next_id - 1).to_string()
    }
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

/// Re-spaces compact JSON the way Python's `json.dumps` does (`": "`, `", "`).
pub fn python_spacing(compact: &str) -> String {
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

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

/// An address as `style` sends it.
fn address(rng: &mut Rng, style: Style) -> String {
    match style {
        Style::Ethers | Style::Web3Py => rng.checksummed(),
        Style::Viem | Style::Web3Js if rng.chance(1, 2) => rng.checksummed(),
        _ => rng.address(),
    }
}

/// The block parameter: mostly `latest`; indexers pin block numbers.
fn block_tag(rng: &mut Rng, style: Style) -> String {
    if style == Style::Indexer {
        return match rng.below(10) {
            0 => format!("{{\"blockHash\":\"{}\"}}", rng.hash()),
            _ => quoted(&rng.quantity(22_000_000)),
        };
    }
    match rng.below(20) {
        0 => quoted("pending"),
        1 => quoted("safe"),
        2 => quoted("finalized"),
        3 | 4 => quoted(&format!("0x{:x}", 21_000_000 + rng.below(1_000_000))),
        _ => quoted("latest"),
    }
}

/// One 32-byte ABI word: an address, a small number or a full-width value,
/// as calldata mostly is.
fn abi_word(rng: &mut Rng, out: &mut String) {
    match rng.below(3) {
        0 => {
            out.push_str("000000000000000000000000");
            rng.push_hex(out, 40);
        }
        1 => {
            let digits = 1 + rng.below(16) as usize;
            out.extend(std::iter::repeat_n('0', 64 - digits));
            rng.push_hex(out, digits);
        }
        _ => rng.push_hex(out, 64),
    }
}

/// Calldata: a selector and 0..=13 words (`balanceOf`, `allowance`, quoter
/// calls, multicall aggregates).
fn calldata(rng: &mut Rng) -> String {
    let words = match rng.below(10) {
        0 => 0,
        1..=4 => 1,
        5 | 6 => 2,
        7 | 8 => 3 + rng.below(3) as usize,
        _ => 6 + rng.below(8) as usize,
    };
    let mut s = rng.hex(8);
    for _ in 0..words {
        abi_word(rng, &mut s);
    }
    s
}

/// The params array of `method` (compact JSON), or `None` for a no-argument
/// call.
fn eth_params(rng: &mut Rng, style: Style, method: &str) -> Option<String> {
    let s = quoted;
    Some(match method {
        "eth_call" => {
            let to = address(rng, style);
            let data = calldata(rng);
            let object = match (style, rng.below(5)) {
                (Style::Viem, 0) => format!(
                    "{{\"data\":\"{data}\",\"from\":\"{}\",\"to\":\"{to}\"}}",
                    address(rng, style)
                ),
                (Style::Viem, _) => format!("{{\"data\":\"{data}\",\"to\":\"{to}\"}}"),
                (Style::Web3Js, 0) => format!(
                    "{{\"from\":\"{}\",\"to\":\"{to}\",\"gas\":\"{}\",\"input\":\"{data}\"}}",
                    address(rng, style),
                    rng.quantity(3_000_000)
                ),
                (_, 0) => format!(
                    "{{\"from\":\"{}\",\"to\":\"{to}\",\"data\":\"{data}\"}}",
                    address(rng, style)
                ),
                _ => format!("{{\"to\":\"{to}\",\"data\":\"{data}\"}}"),
            };
            format!("[{object},{}]", block_tag(rng, style))
        }
        "eth_getTransactionReceipt" | "eth_getTransactionByHash" => format!("[{}]", s(&rng.hash())),
        "eth_getBalance" | "eth_getCode" => {
            format!("[{},{}]", s(&address(rng, style)), block_tag(rng, style))
        }
        "eth_getTransactionCount" => format!(
            "[{},{}]",
            s(&address(rng, style)),
            if rng.chance(1, 2) {
                s("pending")
            } else {
                block_tag(rng, style)
            }
        ),
        "eth_getStorageAt" => {
            let slot = if rng.chance(1, 2) {
                rng.quantity(16)
            } else {
                rng.hash()
            };
            format!(
                "[{},{},{}]",
                s(&address(rng, style)),
                s(&slot),
                block_tag(rng, style)
            )
        }
        "eth_blockNumber"
        | "eth_chainId"
        | "eth_gasPrice"
        | "net_version"
        | "eth_maxPriorityFeePerGas" => return None,
        "eth_getBlockByNumber" => {
            let block = if style == Style::Indexer || rng.chance(1, 2) {
                s(&format!("0x{:x}", 15_000_000 + rng.below(7_000_000)))
            } else {
                s("latest")
            };
            format!("[{block},{}]", rng.chance(1, 2))
        }
        "eth_getBlockByHash" => format!("[{},{}]", s(&rng.hash()), rng.chance(1, 2)),
        "eth_feeHistory" => {
            let count = format!("\"0x{:x}\"", 1 + rng.below(20));
            let percentiles = match rng.below(3) {
                0 => "[25,75]".to_string(),
                1 => "[10,50,90]".to_string(),
                _ => format!("[{}.5,50,97.25]", rng.below(10)),
            };
            format!("[{count},\"latest\",{percentiles}]")
        }
        "eth_getLogs" => {
            let mut filter = String::from("{");
            if rng.chance(1, 8) {
                filter.push_str(&format!("\"blockHash\":\"{}\"", rng.hash()));
            } else {
                let from = 15_000_000 + rng.below(7_000_000);
                filter.push_str(&format!(
                    "\"fromBlock\":\"0x{from:x}\",\"toBlock\":\"0x{:x}\"",
                    from + rng.below(2_000)
                ));
            }
            match rng.below(4) {
                0 => {}
                1 => {
                    let n = 2 + rng.below(4);
                    let list: Vec<String> = (0..n).map(|_| quoted(&address(rng, style))).collect();
                    filter.push_str(&format!(",\"address\":[{}]", list.join(",")));
                }
                _ => filter.push_str(&format!(",\"address\":\"{}\"", address(rng, style))),
            }
            let topics: Vec<String> = (0..1 + rng.below(4))
                .map(|i| match rng.below(6) {
                    0 if i > 0 => "null".to_string(),
                    1 => format!("[\"{}\",\"{}\"]", rng.hash(), rng.hash()),
                    _ => quoted(&rng.hash()),
                })
                .collect();
            filter.push_str(&format!(",\"topics\":[{}]}}", topics.join(",")));
            format!("[{filter}]")
        }
        "eth_estimateGas" => {
            let value = if rng.chance(1, 2) {
                format!(",\"value\":\"{}\"", rng.quantity(1 << 60))
            } else {
                String::new()
            };
            format!(
                "[{{\"from\":\"{}\",\"to\":\"{}\"{value},\"data\":\"{}\"}}]",
                address(rng, style),
                address(rng, style),
                calldata(rng)
            )
        }
        "eth_sendRawTransaction" => {
            // A signed EIP-1559 transaction: 0.3-1 KB as a message.
            let digits = 2 * (110 + rng.below(340) as usize);
            let mut tx = String::from("0x02f8");
            rng.push_hex(&mut tx, digits);
            format!("[{}]", s(&tx))
        }
        other => panic!("no params shape for {other}"),
    })
}

/// One Ethereum request for `method` in `style`; `id` is the JSON text of its
/// id, `id_first` puts it first (some ethers code paths).
pub fn eth_request_for(
    rng: &mut Rng,
    style: Style,
    id_first: bool,
    id: &str,
    method: &str,
) -> String {
    let params = eth_params(rng, style, method);
    match style {
        Style::Viem | Style::Indexer => match params {
            Some(p) => format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\",\"params\":{p}}}"
            ),
            None => format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"}}"),
        },
        Style::Ethers => {
            let p = params.unwrap_or_else(|| "[]".into());
            if id_first {
                format!(
                    "{{\"id\":{id},\"method\":\"{method}\",\"params\":{p},\"jsonrpc\":\"2.0\"}}"
                )
            } else {
                format!(
                    "{{\"method\":\"{method}\",\"params\":{p},\"id\":{id},\"jsonrpc\":\"2.0\"}}"
                )
            }
        }
        Style::Web3Py => {
            let p = params.unwrap_or_else(|| "[]".into());
            python_spacing(&format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"{method}\",\"params\":{p},\"id\":{id}}}"
            ))
        }
        Style::Web3Js => {
            let p = params.unwrap_or_else(|| "[]".into());
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\",\"params\":{p}}}")
        }
        Style::Scripted => {
            let p = params.unwrap_or_else(|| "[]".into());
            let request = format!(
                "{{\"id\":{id},\"jsonrpc\":\"2.0\",\"method\":\"{method}\",\"params\":{p}}}"
            );
            if rng.chance(1, 4) {
                // serde_json's map sorts the params' objects' members too.
                let value: serde_json::Value = serde_json::from_str(&request).unwrap();
                serde_json::to_string_pretty(&value).unwrap() + "\n"
            } else {
                request
            }
        }
    }
}

fn pick_method(rng: &mut Rng, style: Style) -> &'static str {
    rng.pick(if style == Style::Indexer {
        INDEXER_MIX
    } else {
        ETH_MIX
    })
}

fn next_request(rng: &mut Rng, client: &mut Client) -> Vec<u8> {
    let id = client.id(rng);
    let method = pick_method(rng, client.style);
    eth_request_for(rng, client.style, client.id_first, &id, method).into_bytes()
}

/// Client sessions by style, `per_style` of each.
fn sessions(rng: &mut Rng, per_style: usize) -> Vec<Vec<Client>> {
    Style::ALL
        .iter()
        .map(|&s| (0..per_style).map(|_| Client::new(rng, s)).collect())
        .collect()
}

fn style_index(style: Style) -> usize {
    Style::ALL.iter().position(|&s| s == style).unwrap()
}

/// The single-request stream of a public Ethereum gateway: `n` distinct
/// requests from sessions of every client library interleaved
/// ([`SINGLE_CLIENTS`] shares), with the public method mix ([`ETH_MIX`],
/// [`INDEXER_MIX`] for indexers).
pub fn eth_stream(seed: u64, n: usize) -> Vec<Vec<u8>> {
    from_sessions(seed, n, next_request)
}

/// `n` distinct messages, each made by `next` for a session picked at
/// random among those of every client library ([`SINGLE_CLIENTS`] shares).
fn from_sessions(
    seed: u64,
    n: usize,
    mut next: impl FnMut(&mut Rng, &mut Client) -> Vec<u8>,
) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut clients = sessions(&mut rng, 24);
    let mut seen = Distinct::default();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let style = rng.pick(SINGLE_CLIENTS);
        let pool = &mut clients[style_index(style)];
        let at = rng.below(pool.len() as u64) as usize;
        let msg = next(&mut rng, &mut pool[at]);
        if seen.insert(&msg) {
            out.push(msg);
        }
    }
    out
}

/// `n` distinct single requests from one session of `style`.
pub fn eth_singles(seed: u64, style: Style, n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut client = Client::new(&mut rng, style);
    let mut seen = Distinct::default();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let msg = next_request(&mut rng, &mut client);
        if seen.insert(&msg) {
            out.push(msg);
        }
    }
    out
}

/// Appends a batch of `n` requests from `client`, none seen before.
fn push_batch(rng: &mut Rng, client: &mut Client, n: usize, seen: &mut Distinct) -> Vec<u8> {
    let sep: &[u8] = if client.style == Style::Web3Py {
        b", "
    } else {
        b","
    };
    let mut out = vec![b'['];
    let mut count = 0;
    while count < n {
        let msg = next_request(rng, client);
        if !seen.insert(&msg) {
            continue;
        }
        if count > 0 {
            out.extend_from_slice(sep);
        }
        out.extend_from_slice(&msg);
        count += 1;
    }
    out.push(b']');
    out
}

/// One batch of `n` requests from one client of `style`.
pub fn eth_batch(seed: u64, style: Style, n: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut client = Client::new(&mut rng, style);
    push_batch(&mut rng, &mut client, n, &mut Distinct::default())
}

/// `count` batches of `size` requests, each from one client, clients as in
/// [`BATCH_CLIENTS`]; no request repeats anywhere in the corpus.
pub fn eth_batches(seed: u64, size: usize, count: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut clients = sessions(&mut rng, 8);
    let mut seen = Distinct::default();
    (0..count)
        .map(|i| {
            let pool = &mut clients[style_index(BATCH_CLIENTS[i % BATCH_CLIENTS.len()])];
            let at = rng.below(pool.len() as u64) as usize;
            push_batch(&mut rng, &mut pool[at], size, &mut seen)
        })
        .collect()
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

/// `count` distinct blob-carrying `eth_sendRawTransaction` requests of about
/// `size` bytes, from clients of every style in turn.
pub fn eth_big_raw_txs(seed: u64, size: usize, count: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|i| {
            let style = Style::ALL[i % Style::ALL.len()];
            let mut client = Client::new(&mut rng, style);
            let id = client.id(&mut rng);
            // The envelope around a placeholder, then the placeholder filled
            // with a type-3 transaction to the requested size.
            let shell = eth_request_for(
                &mut rng,
                style,
                client.id_first,
                &id,
                "eth_sendRawTransaction",
            );
            let start = shell.find("0x02f8").unwrap();
            let end = start + shell[start..].find('"').unwrap();
            let digits = (size - (shell.len() - (end - start)) - 6) & !1;
            let mut tx = String::from("0x03fa");
            rng.push_hex(&mut tx, digits);
            format!("{}{tx}{}", &shell[..start], &shell[end..]).into_bytes()
        })
        .collect()
}

/// JSON string literal of `s`; `ascii` escapes everything outside ASCII as
/// `\uXXXX` (Python's `json.dumps` default).
pub fn json_string(s: &str, ascii: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

const WORDS: &[&str] = &[
    "the",
    "invoice",
    "deploy",
    "failed",
    "because",
    "cache",
    "user",
    "report",
    "weekly",
    "summary",
    "error",
    "timeout",
    "retry",
    "merge",
    "branch",
    "release",
    "notes",
    "draft",
    "customer",
    "ticket",
    "priority",
    "high",
    "low",
    "database",
    "migration",
    "index",
    "query",
    "latency",
    "p99",
    "budget",
    "Zürich",
    "São Paulo",
    "Kraków",
    "naïve",
    "café",
    "Grüße",
    "東京",
    "こんにちは",
    "日本語のテキスト",
    "Привет",
    "данные",
    "مرحبا",
    "你好世界",
    "🚀",
    "✅",
    "😀",
    "👍🏽",
    "→",
    "€42",
    "—",
];

/// Free text of `words` words, sometimes over several lines.
fn text(rng: &mut Rng, words: usize) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(if rng.chance(1, 12) { '\n' } else { ' ' });
        }
        s.push_str(rng.one_of(WORDS));
    }
    s
}

const CITIES: &[&str] = &[
    "San Francisco, CA",
    "Zürich",
    "東京",
    "São Paulo",
    "Kraków",
    "Reykjavík",
    "Île-de-France",
    "München",
    "Москва",
    "القاهرة",
    "Seoul 서울",
    "New York, NY",
];

/// The `arguments` object of a call to one of a dozen tools, and the tool's
/// name.
fn tool_arguments(rng: &mut Rng, ascii: bool) -> (&'static str, String) {
    let t = |rng: &mut Rng, min: u64, span: u64| {
        let n = min + rng.below(span);
        json_string(&text(rng, n as usize), ascii)
    };
    match rng.below(12) {
        0 => (
            "get_weather",
            format!(
                "{{\"location\":{},\"units\":\"{}\"}}",
                json_string(rng.one_of(CITIES), ascii),
                if rng.chance(1, 2) {
                    "metric"
                } else {
                    "imperial"
                }
            ),
        ),
        1 => (
            "search_files",
            format!(
                "{{\"query\":{},\"max_results\":{},\"include\":[\"*.rs\",\"*.toml\"{}]}}",
                json_string(
                    &format!("fn {}(\"{}\") \\path", rng.one_of(WORDS), rng.below(1000)),
                    ascii
                ),
                1 + rng.below(100),
                if rng.chance(1, 2) {
                    ",\"docs/**/*.md\""
                } else {
                    ""
                }
            ),
        ),
        2 => (
            "run_sql",
            format!(
                "{{\"sql\":\"SELECT id, name, email FROM users WHERE created_at > '2025-{:02}-01' AND region = '{}' ORDER BY id LIMIT {}\",\"read_only\":{},\"timeout_ms\":{}}}",
                1 + rng.below(12),
                rng.below(40),
                rng.below(1000),
                rng.chance(3, 4),
                if rng.chance(1, 2) {
                    "1.5e3".to_string()
                } else {
                    (1000 * (1 + rng.below(30))).to_string()
                }
            ),
        ),
        3 => (
            "read_file",
            format!(
                "{{\"path\":\"/home/user/project/src/{}/{}.rs\"{}}}",
                rng.one_of(&["scan", "envelope", "router", "dispatch"]),
                &rng.hex(10)[2..],
                if rng.chance(1, 3) {
                    format!(
                        ",\"offset\":{},\"limit\":{}",
                        rng.below(2000),
                        50 + rng.below(400)
                    )
                } else {
                    String::new()
                }
            ),
        ),
        4 => {
            let mut content = String::new();
            for _ in 0..2 + rng.below(30) {
                content.push_str(&format!(
                    "\tlet {} = \"{}\"; // {}\n",
                    rng.one_of(&["x", "total", "reply", "arena"]),
                    rng.below(1 << 20),
                    text(rng, 3)
                ));
            }
            (
                "write_file",
                format!(
                    "{{\"path\":\"/tmp/{}.rs\",\"content\":{}}}",
                    &rng.hex(8)[2..],
                    json_string(&content, ascii)
                ),
            )
        }
        5 => (
            "fetch",
            format!(
                "{{\"url\":\"https://example.com/api/v{}/items/{}?page={}&q={}\",\"headers\":{{\"Accept\":\"application/json\",\"X-Request-Id\":\"{}\"}},\"max_length\":{}}}",
                1 + rng.below(3),
                rng.below(100_000),
                rng.below(50),
                rng.one_of(&["rust", "caf%C3%A9", "json-rpc"]),
                &rng.hex(16)[2..],
                5000 * (1 + rng.below(10))
            ),
        ),
        6 => (
            "send_message",
            format!(
                "{{\"channel\":{},\"text\":{},\"thread_ts\":\"17{}.{:06}\"}}",
                json_string(
                    rng.one_of(&["#général", "#ops", "#チーム", "#random"]),
                    ascii
                ),
                t(rng, 4, 30),
                rng.below(100_000_000),
                rng.below(1_000_000)
            ),
        ),
        7 => (
            "create_issue",
            format!(
                "{{\"title\":{},\"body\":{},\"labels\":[\"bug\",\"{}\"],\"assignees\":[],\"milestone\":null}}",
                t(rng, 3, 6),
                json_string(
                    &format!(
                        "## Steps\n1. {}\n2. {}\n\n```\n{}\n```",
                        text(rng, 6),
                        text(rng, 8),
                        text(rng, 10)
                    ),
                    ascii
                ),
                rng.one_of(&["p1", "p2", "needs-triage", "good first issue"])
            ),
        ),
        8 => {
            let conds: Vec<String> = (0..1 + rng.below(4))
                .map(|_| {
                    format!(
                        "{{\"field\":\"{}\",\"op\":\"{}\",\"value\":{}}}",
                        rng.one_of(&["service", "level", "status", "duration_ms"]),
                        rng.one_of(&["eq", "neq", "gt", "in"]),
                        match rng.below(3) {
                            0 => rng.below(5000).to_string(),
                            1 => "[\"error\",\"warn\"]".to_string(),
                            _ => json_string(rng.one_of(WORDS), ascii),
                        }
                    )
                })
                .collect();
            (
                "query_logs",
                format!(
                    "{{\"filter\":{{\"and\":[{}]}},\"time_range\":{{\"from\":\"2026-0{}-1{}T00:00:00Z\",\"to\":\"now\"}},\"limit\":{}}}",
                    conds.join(","),
                    1 + rng.below(9),
                    rng.below(10),
                    10 * (1 + rng.below(100))
                ),
            )
        }
        9 => {
            let dims = 8 + rng.below(56) as usize;
            let vector: Vec<String> = (0..dims)
                .map(|_| {
                    let v = rng.below(2_000_000) as i64 - 1_000_000;
                    format!("{}", v as f64 / 1_000_000.0)
                })
                .collect();
            (
                "vector_search",
                format!(
                    "{{\"vector\":[{}],\"top_k\":{},\"namespace\":\"docs-{}\"}}",
                    vector.join(","),
                    1 + rng.below(50),
                    rng.below(20)
                ),
            )
        }
        10 => (
            "browser_click",
            format!(
                "{{\"element\":{},\"ref\":\"e{}\",\"doubleClick\":{}}}",
                json_string(
                    rng.one_of(&["Submit button", "« Zurück", "ログイン", "Accept cookies"]),
                    ascii
                ),
                rng.below(500),
                rng.chance(1, 10)
            ),
        ),
        _ => (
            "translate",
            format!(
                "{{\"text\":{},\"source_lang\":\"{}\",\"target_lang\":\"{}\"}}",
                t(rng, 5, 40),
                rng.one_of(&["auto", "de", "ja", "pt-BR"]),
                rng.one_of(&["en", "fr", "zh-Hans", "ko"])
            ),
        ),
    }
}

/// How an MCP client writes its messages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum McpClient {
    /// The TypeScript SDK (Claude Desktop, editors): `{"method", "params",
    /// "jsonrpc", "id"}`, integer ids from 0.
    TypeScript,
    /// The Python SDK (pydantic): `jsonrpc` first, integer ids from 1.
    Python,
    /// Clients with string ids; half of them escape non-ASCII text.
    StringIds,
}

struct McpSession {
    client: McpClient,
    /// Opens with `server/discover` and sends version and capabilities in
    /// every request's `_meta` (the 2026-07-28 revision).
    stateless: bool,
    ascii: bool,
    tag: String,
    name: &'static str,
    version: String,
    sent: u64,
    next_id: u64,
    lifetime: u64,
}

impl McpSession {
    fn new(rng: &mut Rng) -> Self {
        let client = match rng.below(10) {
            0..=4 => McpClient::TypeScript,
            5..=7 => McpClient::Python,
            _ => McpClient::StringIds,
        };
        McpSession {
            client,
            stateless: rng.chance(1, 4),
            ascii: client == McpClient::StringIds && rng.chance(1, 2),
            tag: rng.hex(8)[2..].to_string(),
            name: rng.one_of(&[
                "claude-ai",
                "cursor-vscode",
                "mcp-inspector",
                "zed",
                "goose",
            ]),
            version: format!("{}.{}.{}", rng.below(3), rng.below(40), rng.below(20)),
            sent: 0,
            next_id: if client == McpClient::Python { 1 } else { 0 },
            lifetime: 20 + rng.below(600),
        }
    }

    fn id(&mut self) -> String {
        self.next_id += 1;
        let n = self.next_id - 1;
        match self.client {
            McpClient::StringIds => format!("\"{}-{n}\"", self.tag),
            _ => n.to_string(),
        }
    }

    /// `_meta` members for a request's params (with a leading comma), if any.
    fn meta(&self, rng: &mut Rng, progress: &str) -> String {
        let mut m = Vec::new();
        if rng.chance(1, 3) {
            m.push(format!("\"progressToken\":{progress}"));
        }
        if self.stateless {
            m.push("\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"".to_string());
            m.push(format!(
                "\"io.modelcontextprotocol/clientInfo\":{{\"name\":\"{}\",\"version\":\"{}\"}}",
                self.name, self.version
            ));
            m.push("\"io.modelcontextprotocol/clientCapabilities\":{\"sampling\":{},\"elicitation\":{},\"roots\":{\"listChanged\":true}}".to_string());
        }
        if m.is_empty() {
            String::new()
        } else {
            format!(",\"_meta\":{{{}}}", m.join(","))
        }
    }

    fn message(&mut self, method: &str, params: Option<String>, notification: bool) -> String {
        let id = if notification { None } else { Some(self.id()) };
        let p = params.map(|p| format!(",\"params\":{p}"));
        let p = p.as_deref().unwrap_or("");
        match (self.client, id) {
            (McpClient::TypeScript, Some(id)) => {
                format!("{{\"method\":\"{method}\"{p},\"jsonrpc\":\"2.0\",\"id\":{id}}}")
            }
            (McpClient::TypeScript, None) => {
                format!("{{\"method\":\"{method}\"{p},\"jsonrpc\":\"2.0\"}}")
            }
            (_, Some(id)) => {
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"{p}}}")
            }
            (_, None) => format!("{{\"jsonrpc\":\"2.0\",\"method\":\"{method}\"{p}}}"),
        }
    }

    /// The session's next message: the lifecycle first, then mostly tool
    /// calls, with listings, pings and reads sprinkled in.
    fn next(&mut self, rng: &mut Rng) -> String {
        self.sent += 1;
        match (self.sent, self.stateless) {
            (1, false) => {
                let version = if rng.chance(1, 2) {
                    "2025-06-18"
                } else {
                    "2025-11-25"
                };
                let params = format!(
                    "{{\"protocolVersion\":\"{version}\",\"capabilities\":{{\"roots\":{{\"listChanged\":true}},\"sampling\":{{}}}},\"clientInfo\":{{\"name\":\"{}\",\"version\":\"{}\"}}}}",
                    self.name, self.version
                );
                self.message("initialize", Some(params), false)
            }
            (2, false) => self.message("notifications/initialized", None, true),
            (1, true) => {
                let meta = self.meta(rng, "0");
                self.message(
                    "server/discover",
                    Some(format!("{{{}}}", meta.trim_start_matches(','))),
                    false,
                )
            }
            (2, true) | (3, false) => {
                let meta = self.meta(rng, "1");
                let params = if meta.is_empty() {
                    None
                } else {
                    Some(format!("{{{}}}", meta.trim_start_matches(',')))
                };
                self.message("tools/list", params, false)
            }
            _ => match rng.below(100) {
                0 => self.message("ping", None, false),
                1 => {
                    let meta = self.meta(rng, "2");
                    let cursor = format!("\"cursor\":\"{}\"", &rng.hex(12)[2..]);
                    self.message("tools/list", Some(format!("{{{cursor}{meta}}}")), false)
                }
                2 | 3 => {
                    let uri = format!("file:///home/user/project/{}.md", &rng.hex(8)[2..]);
                    self.message(
                        "resources/read",
                        Some(format!("{{\"uri\":\"{uri}\"}}")),
                        false,
                    )
                }
                4 => {
                    let params = format!(
                        "{{\"requestId\":{},\"reason\":\"User requested cancellation\"}}",
                        self.next_id.saturating_sub(1)
                    );
                    self.message("notifications/cancelled", Some(params), true)
                }
                _ => {
                    let (name, args) = tool_arguments(rng, self.ascii);
                    let meta = self.meta(rng, &self.next_id.to_string());
                    let params = format!("{{\"name\":\"{name}\",\"arguments\":{args}{meta}}}");
                    self.message("tools/call", Some(params), false)
                }
            },
        }
    }
}

/// An MCP server's stdio input: `n` distinct messages from interleaved
/// sessions of three kinds of client, mostly `tools/call` with argument
/// objects of a dozen shapes (non-ASCII text, escapes, nested objects,
/// number arrays), the lifecycle (`initialize` or `server/discover`,
/// `notifications/initialized`), `tools/list`, pings, reads and
/// cancellations sprinkled in.
pub fn mcp_stream(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut sessions: Vec<McpSession> = (0..32).map(|_| McpSession::new(&mut rng)).collect();
    let mut seen = Distinct::default();
    let mut out = Vec::with_capacity(n);
    let mut distinct = 0;
    while distinct < n {
        let at = rng.below(sessions.len() as u64) as usize;
        let msg = sessions[at].next(&mut rng).into_bytes();
        if sessions[at].sent >= sessions[at].lifetime {
            sessions[at] = McpSession::new(&mut rng);
        }
        // Notifications carry no id, so sessions send the same bytes (every
        // `notifications/initialized`): repeats of them are kept, as on the
        // wire, and only distinct messages count towards `n`.
        let notification = !msg.windows(5).any(|w| w == b"\"id\":");
        if seen.insert(&msg) {
            distinct += 1;
            out.push(msg);
        } else if notification {
            out.push(msg);
        }
    }
    out
}

/// Fewer than `below` log objects of one transaction, comma-separated.
fn log_list(rng: &mut Rng, below: u64, block: &str, tx: &str) -> String {
    let logs: Vec<String> = (0..rng.below(below))
        .map(|_| {
            let topics = 1 + rng.below(4) as usize;
            log_object(rng, topics, block, tx)
        })
        .collect();
    logs.join(",")
}

/// A 2,048-bit logs bloom.
fn bloom(rng: &mut Rng) -> String {
    let mut bloom = String::from("0x");
    rng.push_hex(&mut bloom, 512);
    bloom
}

/// A log object as nodes return it, `topics` topics long.
fn log_object(rng: &mut Rng, topics: usize, block: &str, tx: &str) -> String {
    let topics: Vec<String> = (0..topics).map(|_| format!("\"{}\"", rng.hash())).collect();
    let mut data = String::from("0x");
    let words = rng.below(4) as usize;
    rng.push_hex(&mut data, 64 * words);
    format!(
        "{{\"address\":\"{}\",\"topics\":[{}],\"data\":\"{data}\",\"blockNumber\":\"{block}\",\"transactionHash\":\"{tx}\",\"transactionIndex\":\"{}\",\"blockHash\":\"{}\",\"logIndex\":\"{}\",\"removed\":false}}",
        rng.address(),
        topics.join(","),
        rng.quantity(300),
        rng.hash(),
        rng.quantity(500)
    )
}

/// What an upstream answers to `method`: the JSON text of its `result`, or
/// of its `error` object (`Err`).
fn eth_result_for(rng: &mut Rng, method: &str) -> Result<String, String> {
    // A provider's rate limit, now and then, on any method.
    if rng.chance(1, 100) {
        return Err(r#"{"code":-32005,"message":"limit exceeded"}"#.into());
    }
    let q = |rng: &mut Rng, max| format!("\"{}\"", rng.quantity(max));
    Ok(match method {
        "eth_call" | "eth_getStorageAt" => {
            if rng.chance(8, 100) {
                let mut data = String::from("0x08c379a0");
                rng.push_hex(&mut data, 64 * 3);
                return Err(format!(
                    r#"{{"code":3,"message":"execution reverted: {}","data":"{data}"}}"#,
                    rng.one_of(&[
                        "ERC20: transfer amount exceeds balance",
                        "Ownable: caller is not the owner",
                        "STF"
                    ])
                ));
            }
            let mut out = String::from("\"0x");
            let words = 1 + rng.below(6) as usize;
            rng.push_hex(&mut out, 64 * words);
            out + "\""
        }
        "eth_getTransactionReceipt" => {
            let (block, tx) = (rng.quantity(1 << 25), rng.hash());
            let logs = log_list(rng, 4, &block, &tx);
            let bloom = bloom(rng);
            format!(
                "{{\"blockHash\":\"{}\",\"blockNumber\":\"{block}\",\"contractAddress\":null,\"cumulativeGasUsed\":{},\"effectiveGasPrice\":{},\"from\":\"{}\",\"gasUsed\":{},\"logs\":[{}],\"logsBloom\":\"{bloom}\",\"status\":\"0x1\",\"to\":\"{}\",\"transactionHash\":\"{tx}\",\"transactionIndex\":{},\"type\":\"0x2\"}}",
                rng.hash(),
                q(rng, 30_000_000),
                q(rng, 1 << 36),
                rng.address(),
                q(rng, 1_000_000),
                logs,
                rng.address(),
                q(rng, 300)
            )
        }
        "eth_getBlockByNumber" | "eth_getBlockByHash" => {
            let txs: Vec<String> = (0..rng.below(40))
                .map(|_| format!("\"{}\"", rng.hash()))
                .collect();
            let bloom = bloom(rng);
            format!(
                "{{\"baseFeePerGas\":{},\"difficulty\":\"0x0\",\"extraData\":\"0x\",\"gasLimit\":\"0x1c9c380\",\"gasUsed\":{},\"hash\":\"{}\",\"logsBloom\":\"{bloom}\",\"miner\":\"{}\",\"mixHash\":\"{}\",\"nonce\":\"0x0000000000000000\",\"number\":{},\"parentHash\":\"{}\",\"receiptsRoot\":\"{}\",\"size\":{},\"stateRoot\":\"{}\",\"timestamp\":{},\"transactions\":[{}],\"transactionsRoot\":\"{}\",\"uncles\":[]}}",
                q(rng, 1 << 36),
                q(rng, 30_000_000),
                rng.hash(),
                rng.address(),
                rng.hash(),
                q(rng, 1 << 25),
                rng.hash(),
                rng.hash(),
                q(rng, 200_000),
                rng.hash(),
                q(rng, 1 << 31),
                txs.join(","),
                rng.hash()
            )
        }
        "eth_getLogs" => {
            let (block, tx) = (rng.quantity(1 << 25), rng.hash());
            format!("[{}]", log_list(rng, 9, &block, &tx))
        }
        "eth_getTransactionByHash" => format!(
            "{{\"blockHash\":\"{}\",\"blockNumber\":{},\"from\":\"{}\",\"gas\":{},\"gasPrice\":{},\"hash\":\"{}\",\"input\":\"{}\",\"nonce\":{},\"to\":\"{}\",\"transactionIndex\":{},\"value\":{},\"type\":\"0x2\",\"chainId\":\"0x1\",\"v\":\"0x1\",\"r\":{},\"s\":{}}}",
            rng.hash(),
            q(rng, 1 << 25),
            rng.address(),
            q(rng, 1_000_000),
            q(rng, 1 << 36),
            rng.hash(),
            calldata(rng),
            q(rng, 5000),
            rng.address(),
            q(rng, 300),
            q(rng, 1 << 60),
            q(rng, u64::MAX),
            q(rng, u64::MAX)
        ),
        "eth_getCode" => {
            let mut out = String::from("\"0x");
            let bytes = 100 + rng.below(3000) as usize;
            rng.push_hex(&mut out, 2 * bytes);
            out + "\""
        }
        "eth_sendRawTransaction" => {
            if rng.chance(5, 100) {
                return Err(r#"{"code":-32000,"message":"nonce too low"}"#.into());
            }
            format!("\"{}\"", rng.hash())
        }
        "eth_feeHistory" => format!(
            "{{\"oldestBlock\":{},\"baseFeePerGas\":[{},{},{}],\"gasUsedRatio\":[0.5,0.31,0.87],\"reward\":[[{}],[{}]]}}",
            q(rng, 1 << 25),
            q(rng, 1 << 36),
            q(rng, 1 << 36),
            q(rng, 1 << 36),
            q(rng, 1 << 30),
            q(rng, 1 << 30)
        ),
        "net_version" => "\"1\"".into(),
        _ => q(rng, 1 << 40),
    })
}

/// What a gateway reads back from its upstreams for [`eth_stream`]'s
/// traffic: `n` distinct responses, ids as the clients wrote them, results
/// shaped by method (quantities, ABI words, receipts and blocks with
/// 512-digit blooms, logs, code), errors now and then (reverts with `data`,
/// rate limits, rejected transactions), from two server families mixed:
/// geth, erigon and anvil write `jsonrpc`, `id`, `result`; jsonrpsee (reth)
/// and Nethermind write `jsonrpc`, `result`, `id`.
pub fn eth_responses(seed: u64, n: usize) -> Vec<Vec<u8>> {
    from_sessions(seed, n, |rng, client| {
        let id = client.id(rng);
        let method = pick_method(rng, client.style);
        let (member, value) = match eth_result_for(rng, method) {
            Ok(result) => ("result", result),
            Err(error) => ("error", error),
        };
        let msg = if rng.chance(3, 5) {
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"{member}\":{value}}}")
        } else {
            format!("{{\"jsonrpc\":\"2.0\",\"{member}\":{value},\"id\":{id}}}")
        };
        msg.into_bytes()
    })
}

/// The last `n` messages of `corpus` (past the sessions' start-up): a small
/// corpus that, replayed, stays in the caches and is learned by the branch
/// predictor (for comparison only).
pub fn hot(corpus: &[Vec<u8>], n: usize) -> Vec<Vec<u8>> {
    corpus[corpus.len() - n.min(corpus.len())..].to_vec()
}

/// `msgs` as a line-delimited transport carries them (stdio, TCP): a
/// message written over several lines (a script's pretty-printed one) is
/// written on one, its members in the same order.
pub fn one_line(msgs: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    msgs.into_iter()
        .map(|m| {
            if m.contains(&b'\n') {
                let value: serde_json::Value = serde_json::from_slice(&m).unwrap();
                serde_json::to_vec(&value).unwrap()
            } else {
                m
            }
        })
        .collect()
}

/// Total size of a corpus in bytes.
pub fn bytes(corpus: &[Vec<u8>]) -> usize {
    corpus.iter().map(Vec::len).sum()
}
