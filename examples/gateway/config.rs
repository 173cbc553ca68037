//! Command-line options.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
rpcwire gateway: an Ethereum JSON-RPC gateway (HTTP and WebSocket on one port)

usage: gateway [options]

  --listen ADDR         where to listen (default 127.0.0.1:8545; port 0 picks one)
  --upstream URL        an upstream node (http://host:port/path or ws://...);
                        repeat for several: the first healthy one serves
                        (in the order given), the next takes over when it fails
  --upstream-ws URL     the WebSocket upstream for eth_subscribe (default: the
                        first ws:// upstream, else the first upstream's URL
                        with ws:// for http://)
  --archive URL         an archive node (http://host:port/path) for calls
                        reading state (eth_call, eth_getBalance, traces...)
                        at blocks older than the --upstreams keep, which
                        full nodes refuse; repeat for several: they fail
                        over as --upstream does
  --state-blocks N      how many recent blocks' state the --upstreams keep
                        (default 128, geth's; reth's full node 10064): with
                        --archive, state calls on older blocks go to the
                        archive, and any a full node answers 'missing
                        trie node' (or the like) are retried there
  --timeout MS          per-request upstream timeout (default 30000)
  --connect-timeout MS  how long making a connection to an upstream may take
                        (the TCP connect, and a ws:// upstream's upgrade):
                        past it the call moves to the next upstream, as
                        when a connection is refused (default: 2000, or
                        half of --timeout if that is less; under 1000 it
                        ends before the kernel's first SYN retry)
  --upstream-connections N
                        HTTP calls in flight per upstream, each on a
                        connection of its own (default 128); more wait
  --upstream-idle MS    close a pooled HTTP connection to an upstream left
                        idle this long (default 30000)
  --ws-ping MS          ping the WebSocket upstream this often; one that sends
                        no pong and no reply for two of these is closed and
                        reconnected (default 20000; 0: never)
  --allow PREFIX        lift a deny rule, named as it is (admin_,
                        personal_, debug_); any other value is refused
  --deny PREFIX         also deny methods starting with PREFIX
  --max-body BYTES      largest request (default 5242880)
  --max-batch N         longest batch (default 1000)
  --max-response BYTES  largest reply (default 25000000)
  --chain-id N          the built-in chain's id (default 31337)
  --block-time SECS     the built-in chain also mines an empty block this often
  --chain-tx-bytes BYTES  the memory the built-in chain's transactions take,
                        in all: their signed bytes and 2.5 KiB each kept
                        with them (default 67108864, about 24,000
                        transfers); past it, sends are refused
  --client h1|hyper     the HTTP upstream client: the gateway's own pooled
                        HTTP/1.1 client (default), or hyper-util's
  --threads N           workers, each a one-thread runtime with its own
                        listening socket on the port (default: one per
                        core; at most 1024)
  --shutdown-grace MS   how long a shutdown waits for requests in flight
                        (default 10000)
  --cors ORIGIN         let pages of ORIGIN (https://app.example.org) call
                        from a browser (CORS preflights answered,
                        Access-Control-Allow-Origin sent; WebSocket upgrades
                        from it accepted); repeat for several, * for any.
                        Without it browsers' cross-origin calls and
                        WebSocket upgrades are refused; with it, other
                        pages' preflights and upgrades get 403
  --vhosts LIST         the host names the port answers to, comma-separated
                        (default localhost; * for any), as geth's
                        --http.vhosts: HTTP requests and WebSocket upgrades
                        whose Host (port aside) is neither listed nor an IP
                        address get 403, so that a web page whose domain was
                        made to resolve to this address (DNS rebinding)
                        cannot call it. Behind a proxy or a DNS name, list
                        the names clients reach it by (or *)
  --gzip BYTES          compress answers of at least BYTES with gzip for
                        clients that accept it (Accept-Encoding: gzip, as
                        web3.py, ethers and curl --compressed send), as geth
                        does: large eth_getLogs or block answers shrink
                        2x or more for clients across a network, for 6-8
                        ms of CPU per MiB (default: off)
  --cache-bytes N       the response cache's bound in bytes (default 67108864,
                        64 MiB; 0: no cache). Only results that can never
                        change are kept: constants (web3_sha3), calls naming
                        their block by hash once it is learnt to be the
                        canonical block of a final number, calls naming a
                        block number at
                        or below the finalized block (fromBlock and toBlock
                        for eth_getLogs), transactions (receipts, ...) whose
                        blockNumber is final; never a block tag (latest,
                        earliest, ...) or an absent block, errors, null, a result past a
                        sixteenth of the bound, or a fallback upstream's
                        answer (the first --archive's, for the calls sent
                        to it, is kept as the first upstream's). Keyed by method and params byte for byte as
                        sent; least recently used entries go first. In
                        front of a dev chain whose history can be rewritten
                        (anvil_reset, evm_revert), use --cache-bytes 0
  --finalized-every MS  ask the first upstream for its finalized block
                        (eth_getBlockByNumber finalized) at most this
                        often, and only when a call to cache needs a later
                        block than the one known (default 6000)
  --ipc PATH            also serve JSON-RPC on a Unix socket at PATH, as
                        geth's --ipcpath does (JSON values back to back,
                        each reply followed by a newline; eth_subscribe as
                        over WebSocket), the same methods, policy, cache
                        and limits; the socket is its owner's only (0600,
                        as geth makes it). A socket file left at PATH by an
                        earlier run is replaced; a socket another process
                        serves, or anything else at PATH, is refused (a
                        symbolic link too, wherever it leads: give the
                        path it leads to);
                        missing directories are made (0751, as geth).
                        Removed when the gateway exits
  --metrics ADDR        serve GET /metrics (Prometheus text) and GET /health
                        (200 when an upstream answers eth_chainId with a
                        result or the built-in chain serves, else 503; a
                        forward answered with a result, or a probe's
                        outcome, stands for a second, so
                        probes ask the upstream at most once a second) on
                        a listener of their own at ADDR (default: off); up
                        through a shutdown's drain (/health then 503,
                        status draining, with the calls still in flight)
                        until the process exits
  -h, --help            this text

With no --upstream it serves a built-in in-memory chain (anvil's dev
accounts funded, value transfers only).

SIGTERM or SIGINT (Ctrl-C) stops it gracefully: the port (and the --ipc
socket) refuses new connections, requests in flight (calls, batches,
WebSocket and IPC calls) are
answered for up to --shutdown-grace, WebSocket clients are closed with
1001 (going away), and it exits with status 0; or, when the grace ran out
with calls still in flight (dropped unanswered), with status 3, saying on
standard error how many. A second signal during the drain exits at once
(status 130 for SIGINT, 143 for SIGTERM).";

/// The largest byte limit taken (`--max-body`, `--max-response`): no
/// limit in effect, and clear of overflow in the sums the limits take part
/// in (where a reply starts in the buffer plus its allowance: at
/// `u64::MAX` that sum overflowed, a panic in a debug build, every reply
/// refused as too large in a release build).
const MAX_BYTES: u64 = 1 << 40;

/// A byte limit from the command line, at most [`MAX_BYTES`] (and what a
/// `usize` holds).
fn bytes(n: u64) -> usize {
    usize::try_from(n.min(MAX_BYTES)).unwrap_or(usize::MAX >> 2)
}

/// `--chain-tx-bytes`' default: 64 MiB (about 24,000 transfers, each
/// counted as its signed bytes and what is kept with them,
/// `chain::KEPT_PER_TRANSACTION`).
pub const DEFAULT_CHAIN_TX_BYTES: usize = 64 << 20;
/// `--cache-bytes`' default: 64 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;
/// `--finalized-every`'s default: about half an Ethereum slot.
pub const DEFAULT_FINALIZED_EVERY: Duration = Duration::from_secs(6);

/// `--state-blocks`' default: geth's full node keeps the state of the
/// last 128 blocks.
pub const DEFAULT_STATE_BLOCKS: u64 = 128;

/// The most workers `--threads` starts: each is a thread with a runtime
/// and a listening socket, and a count past the machine's cores only
/// splits the same work.
const MAX_THREADS: usize = 1024;

/// What the gateway is run with.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub upstreams: Vec<String>,
    pub upstream_ws: Option<String>,
    pub timeout: Duration,
    /// How long making a connection to an upstream may take (`None`:
    /// [`Config::connect_timeout`]'s default).
    pub connect_timeout: Option<Duration>,
    pub deny: Vec<String>,
    pub max_body: usize,
    pub max_batch: u32,
    pub max_response: usize,
    pub chain_id: u64,
    /// The bytes of signed transactions the built-in chain keeps in all
    /// (it keeps each for its life); past them, sends are refused.
    pub chain_tx_bytes: usize,
    pub block_time: Option<Duration>,
    pub threads: usize,
    pub hyper_client: bool,
    /// How often a WebSocket upstream is pinged; `None` never.
    pub ws_ping: Option<Duration>,
    /// How long a pooled HTTP connection to an upstream is kept idle
    /// (`--upstream-idle`) before it is closed.
    pub upstream_idle: Duration,
    /// HTTP exchanges in flight per upstream, at most.
    pub upstream_connections: usize,
    /// How long a graceful shutdown waits for requests in flight.
    pub shutdown_grace: Duration,
    /// Where `/metrics` and `/health` are served; `None`: nowhere.
    pub metrics: Option<SocketAddr>,
    /// The Unix socket JSON-RPC is also served on (`--ipc`); `None`: none.
    pub ipc: Option<PathBuf>,
    /// The origins browsers may call from (`--cors`); `None`: CORS off.
    pub cors: Option<rpcwire::server::cors::Cors>,
    /// The host names the port answers to (`--vhosts`).
    pub vhosts: rpcwire::server::hosts::AllowedHosts,
    /// Answers of at least this many bytes are gzip-compressed for
    /// clients that accept it (`--gzip`); `None`: never.
    pub gzip_above: Option<usize>,
    /// The response cache's bound in bytes; 0: no cache.
    pub cache_bytes: usize,
    /// How often at most the finalized block is asked for.
    pub finalized_every: Duration,
    /// The archive nodes (`--archive`), for state at old blocks.
    pub archives: Vec<String>,
    /// How many recent blocks' state the `--upstream`s keep.
    pub state_blocks: u64,
}

/// How long making a connection to an upstream may take by default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a pooled upstream connection is kept idle by default: under
/// the idle limits of the servers in front of nodes (geth closes at 120 s,
/// nginx's `keepalive_timeout` is 75 s), so the gateway closes first.
pub const DEFAULT_UPSTREAM_IDLE: Duration = Duration::from_secs(30);

/// The `--deny` rule (a method-name prefix) that `method` falls under, if
/// any: the one check the proxy, its relayed methods and the built-in
/// chain all make.
pub fn deny_rule<'r>(rules: &'r [String], method: &str) -> Option<&'r str> {
    rules
        .iter()
        .find(|rule| method.starts_with(rule.as_str()))
        .map(String::as_str)
}

/// `--vhosts`' default: geth's `localhost` (addresses, such as the
/// `127.0.0.1` clients given `http://127.0.0.1:8545` send, are always
/// served).
pub const DEFAULT_VHOSTS: [&str; 1] = ["localhost"];

fn default_vhosts() -> rpcwire::server::hosts::AllowedHosts {
    rpcwire::server::hosts::AllowedHosts::list(DEFAULT_VHOSTS).expect("valid host names")
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8545".parse().expect("a valid address"),
            upstreams: Vec::new(),
            upstream_ws: None,
            timeout: Duration::from_secs(30),
            connect_timeout: None,
            deny: ["admin_", "personal_", "debug_"].map(String::from).to_vec(),
            max_body: rpcwire::Parser::DEFAULT_MAX_MESSAGE_LEN,
            max_batch: rpcwire::Parser::DEFAULT_MAX_BATCH_LEN,
            max_response: rpcwire::dispatch::DEFAULT_MAX_RESPONSE_LEN,
            chain_id: 31337,
            chain_tx_bytes: DEFAULT_CHAIN_TX_BYTES,
            block_time: None,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            hyper_client: false,
            ws_ping: Some(Duration::from_secs(20)),
            upstream_idle: DEFAULT_UPSTREAM_IDLE,
            upstream_connections: 128,
            shutdown_grace: rpcwire::server::Limits::default().shutdown_grace,
            metrics: None,
            ipc: None,
            cors: None,
            vhosts: default_vhosts(),
            gzip_above: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
            finalized_every: DEFAULT_FINALIZED_EVERY,
            archives: Vec::new(),
            state_blocks: DEFAULT_STATE_BLOCKS,
        }
    }
}

impl Config {
    /// How long making a connection to an upstream may take: the TCP
    /// connect (and a `ws://` upstream's upgrade). It is shorter than the
    /// call's timeout so that an upstream that drops connection attempts
    /// without a word (a host gone from the network, a full listen queue)
    /// costs a call part of its time, not all of it: the call moves on to
    /// the next upstream, as after a refused connection. By default
    /// [`CONNECT_TIMEOUT`], or half of `--timeout` if that is less;
    /// `--connect-timeout` sets it, at most `--timeout`.
    pub fn connect_timeout(&self) -> Duration {
        match self.connect_timeout {
            Some(t) => t.min(self.timeout),
            None => CONNECT_TIMEOUT.min(self.timeout / 2),
        }
    }

    /// Reads the command line; `Err` carries the message to print.
    pub fn from_args(mut args: impl Iterator<Item = String>) -> Result<Config, String> {
        let mut c = Config::default();
        let mut origins = Vec::new();
        let mut chain_options = Vec::new();
        while let Some(arg) = args.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            if name == "-h" || name == "--help" {
                return Err(USAGE.to_string());
            }
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))
            };
            let number = |v: String| -> Result<u64, String> {
                v.parse().map_err(|_| format!("{name}: not a number: {v}"))
            };
            // 0 would refuse every request, batch or reply, time every
            // call out, leave no worker: refused, not quietly raised.
            let positive = |v: String| -> Result<u64, String> {
                match number(v)? {
                    0 => Err(format!("{name}: at least 1, not 0")),
                    n => Ok(n),
                }
            };
            match name.as_str() {
                "--listen" => {
                    let v = value()?;
                    c.listen = v
                        .parse()
                        .map_err(|_| format!("--listen: not an address: {v}"))?;
                }
                "--upstream" => c.upstreams.push(value()?),
                "--upstream-ws" => c.upstream_ws = Some(value()?),
                "--archive" => c.archives.push(value()?),
                "--state-blocks" => c.state_blocks = number(value()?)?,
                "--timeout" => c.timeout = Duration::from_millis(positive(value()?)?),
                "--connect-timeout" => {
                    c.connect_timeout = Some(Duration::from_millis(positive(value()?)?));
                }
                "--allow" => {
                    let v = value()?;
                    let rules = c.deny.len();
                    c.deny.retain(|d| *d != v);
                    // A value that lifts nothing (`debug` for `debug_`, one
                    // method of a denied family) would leave the deny in
                    // place without a word.
                    if c.deny.len() == rules {
                        return Err(format!(
                            "--allow {v}: no deny rule is {v:?} (the rules: {})",
                            c.deny.join(", ")
                        ));
                    }
                }
                "--deny" => {
                    let v = value()?;
                    // An empty prefix matches every method.
                    if v.is_empty() {
                        return Err("--deny: an empty prefix would deny every method".to_string());
                    }
                    c.deny.push(v);
                }
                "--max-body" => c.max_body = bytes(positive(value()?)?),
                "--max-batch" => {
                    c.max_batch = positive(value()?)?.min(u32::MAX as u64) as u32;
                }
                "--max-response" => c.max_response = bytes(positive(value()?)?),
                "--chain-id" => {
                    c.chain_id = number(value()?)?;
                    chain_options.push("--chain-id");
                }
                "--chain-tx-bytes" => {
                    c.chain_tx_bytes = bytes(number(value()?)?);
                    chain_options.push("--chain-tx-bytes");
                }
                "--client" => {
                    c.hyper_client = match value()?.as_str() {
                        "hyper" => true,
                        "h1" => false,
                        other => return Err(format!("--client: h1 or hyper, not {other}")),
                    }
                }
                "--upstream-connections" => {
                    let n = positive(value()?)?;
                    if n > 1 << 20 {
                        return Err(format!("--upstream-connections {n}: at most {}", 1 << 20));
                    }
                    c.upstream_connections = n as usize;
                }
                "--upstream-idle" => {
                    c.upstream_idle = Duration::from_millis(positive(value()?)?);
                }
                "--ws-ping" => {
                    let ms = number(value()?)?;
                    c.ws_ping = (ms > 0).then(|| Duration::from_millis(ms));
                }
                "--metrics" => {
                    let v = value()?;
                    c.metrics = Some(
                        v.parse()
                            .map_err(|_| format!("--metrics: not an address: {v}"))?,
                    );
                }
                "--ipc" => {
                    let v = value()?;
                    if v.is_empty() {
                        return Err("--ipc: an empty path".to_string());
                    }
                    if !cfg!(unix) {
                        return Err("--ipc: Unix sockets only (this system has none)".to_string());
                    }
                    c.ipc = Some(PathBuf::from(v));
                }
                "--cors" => origins.push(value()?),
                "--vhosts" => {
                    let v = value()?;
                    let hosts = rpcwire::server::hosts::AllowedHosts::list(
                        v.split(',').filter(|h| !h.trim().is_empty()),
                    );
                    c.vhosts = hosts.map_err(|e| format!("--vhosts: {e}"))?;
                }
                "--gzip" => c.gzip_above = Some(bytes(number(value()?)?)),
                "--cache-bytes" => c.cache_bytes = bytes(number(value()?)?),
                "--finalized-every" => {
                    c.finalized_every = Duration::from_millis(number(value()?)?);
                }
                "--shutdown-grace" => {
                    c.shutdown_grace = Duration::from_millis(number(value()?)?);
                }
                "--threads" => {
                    let n = positive(value()?)?;
                    if n > MAX_THREADS as u64 {
                        return Err(format!("--threads {n}: at most {MAX_THREADS}"));
                    }
                    c.threads = n as usize;
                }
                "--block-time" => {
                    c.block_time = Some(Duration::from_secs(positive(value()?)?));
                    chain_options.push("--block-time");
                }
                _ => return Err(format!("unknown option: {arg}\n\n{USAGE}")),
            }
        }
        if !origins.is_empty() {
            let cors = rpcwire::server::cors::Cors::origins(&origins);
            c.cors = Some(cors.map_err(|e| format!("--cors: {e}"))?);
        }
        if c.proxies() {
            // The built-in chain's options mean nothing in front of
            // upstreams: taken without a word, they changed nothing.
            if let Some(flag) = chain_options.first() {
                return Err(format!(
                    "{flag}: an option of the built-in chain, which --upstream replaces (the upstream's chain is served)"
                ));
            }
        }
        for (flag, url) in c
            .upstreams
            .iter()
            .map(|u| ("--upstream", u))
            .chain(c.upstream_ws.iter().map(|u| ("--upstream-ws", u)))
            .chain(c.archives.iter().map(|u| ("--archive", u)))
        {
            check_url(flag, url)?;
        }
        if let Some(u) = c.upstream_ws.as_ref().filter(|u| !u.starts_with("ws://")) {
            return Err(format!(
                "--upstream-ws {}: a ws:// URL (subscriptions need a WebSocket; this example has no TLS)",
                shown_url(u)
            ));
        }
        for u in &c.upstreams {
            if !(u.starts_with("http://") || u.starts_with("ws://")) {
                return Err(format!(
                    "unsupported upstream URL {}: http:// and ws:// only (this example has no TLS)",
                    shown_url(u)
                ));
            }
        }
        for u in &c.archives {
            if !u.starts_with("http://") {
                return Err(format!(
                    "unsupported archive URL {}: http:// only (this example has no TLS)",
                    shown_url(u)
                ));
            }
        }
        if !c.archives.is_empty() && !c.proxies() {
            return Err(
                "--archive needs --upstream: the full nodes that serve everything else".to_string(),
            );
        }
        Ok(c)
    }

    /// Whether requests are forwarded (some upstream given).
    pub fn proxies(&self) -> bool {
        !self.upstreams.is_empty() || self.upstream_ws.is_some()
    }

    /// The limits the servers enforce.
    pub fn limits(&self) -> rpcwire::server::Limits {
        rpcwire::server::Limits {
            max_message_len: self.max_body,
            shutdown_grace: self.shutdown_grace,
            ..Default::default()
        }
    }

    /// The parser (limits on what is read).
    pub fn parser(&self) -> rpcwire::Parser {
        rpcwire::Parser::new()
            .max_message_len(self.max_body)
            .max_batch_len(self.max_batch)
    }
}

/// `url` as errors show it: its scheme and `host:port`, without what may
/// hold a secret (a provider's path or query carries the API key,
/// `/v3/<key>`; user info a password), which is `…` when present. Start-up
/// errors go to the operator's logs, kept apart from the keys as the
/// gateway's other messages are (`upstream::display_name`).
pub fn shown_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let hidden = authority.len() > host.len() || !matches!(&rest[end..], "" | "/");
    format!("{scheme}{host}{}", if hidden { "…" } else { "" })
}

/// An upstream URL the clients can use: a host, and a port in range if
/// one is given (`http://` and `http://127.0.0.1:99999` got past the
/// scheme check: the first failed the start with status 1, the second
/// started and failed every call).
fn check_url(flag: &str, url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("{flag} {}: not a URL: {e}", shown_url(url)))?;
    let url = shown_url(url);
    let Some(authority) = uri.authority().filter(|a| !a.host().is_empty()) else {
        return Err(format!("{flag} {url}: no host"));
    };
    // Refused here rather than when the first request is sent (the port
    // claimed, status 1): neither upstream client sends credentials.
    if authority.as_str().contains('@') {
        return Err(format!(
            "{flag} {url}: user info (user:password@) is not supported"
        ));
    }
    let port = authority.as_str().rsplit_once(':').filter(|(host, _)| {
        // An IPv6 literal's colons are inside its brackets.
        !host.starts_with('[') || host.ends_with(']')
    });
    if let Some((_, port)) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("{flag} {url}: port {port:?} is not 0 to 65535"));
    }
    Ok(())
}
