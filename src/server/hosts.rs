//! Which host names a server answers to: the `Host` allowlist that stops
//! DNS rebinding (features `http`, `ws` and `mcp`), geth's `--http.vhosts`
//! and `--ws.origins`' companion for hosts.
//!
//! A web page cannot call a server on `127.0.0.1` across origins without
//! CORS allowing it, but it can make its own domain resolve to
//! `127.0.0.1` once loaded (DNS rebinding): the browser then sends the
//! page's calls as same-origin requests, with no preflight, to the local
//! server, and lets the page read the answers. What gives such a request
//! away is its `Host`: the attacker's domain. A server that lists the
//! names it is reached by (`localhost`, its own domain) refuses the rest.
//!
//! With an [`AllowedHosts`] set on `HttpService::allowed_hosts` (feature
//! `http`), `WsServer::allowed_hosts` (feature `ws`, a WebSocket server
//! on a port of its own: its opening handshakes are checked as an HTTP
//! request is) or MCP's `HttpConfig::allowed_hosts` (feature `mcp`, its
//! Streamable HTTP endpoint, whose own `Origin` check misses requests that
//! carry none):
//!
//! | request | answer |
//! | --- | --- |
//! | its host listed (`Host`, or the request target's authority: HTTP/2's `:authority`, an absolute-form target), any port, any case, with or without the root's trailing dot (`localhost.`) | as without the check |
//! | its host an IP address (`127.0.0.1`, `[::1]`, `192.0.2.7:8545`), listed or not | as without the check: rebinding needs a name, so a request naming an address is not a rebound page's (geth lets them through too) |
//! | its host not listed | `403`, a -32600 body naming the host, before the body is read (the connection closes after it); counted as [`LimitKind::Host`](super::LimitKind::Host) (MCP's endpoint keeps no metrics) |
//! | HTTP/1.1 without `Host`, or with more than one | `400`, a -32600 body (RFC 9112 §3.2); counted the same; with no allowlist too (below) |
//! | HTTP/1.0 or HTTP/2 naming no host | as without the check: no browser sends one, so it cannot be a rebound page's (geth lets them through too) |
//! | a WebSocket upgrade on a combined port (`server::combined`), or an opening handshake on a `WsServer`'s own port | the same, before the upgrade |
//!
//! Without one (the default) the host's name is not looked at. An
//! HTTP/1.1 request without one valid `Host` (none, or two) still gets the `400`
//! (counted as [`LimitKind::Host`](super::LimitKind::Host): in the
//! service's metrics, or the server's for a service in tower layers) from
//! every server of rpcwire's (`http::serve` and `Server`, on its own
//! HTTP/1.1 loop or hyper's path, WebSocket upgrades on a combined port
//! included; a `WsServer`'s own port; MCP's Streamable HTTP `serve`): RFC
//! 9112 §3.2 asks it of any server, as Go's net/http (geth's) does. A
//! service mounted in another server (axum), or called in memory, leaves
//! that rule to that server. geth's default list is `localhost`, which
//! suits a node on a workstation; a library serves behind proxies, load
//! balancers and container networks that reach it by names it cannot
//! know, and turning the check on by default would refuse them after an
//! upgrade. Turn it on for a server on a loopback or private
//! address that browsers on the same machine or network can reach (a
//! development node, a wallet's or signer's local endpoint): list the
//! names clients use (`localhost`, the server's own domain; addresses
//! need no listing). A server that answers to any name (public endpoints, behind a
//! proxy that checks it) needs none.

use std::net::Ipv6Addr;

/// The host names a server answers to; see the [module docs](self).
///
/// ```
/// use rpcwire::server::hosts::AllowedHosts;
/// let hosts = AllowedHosts::list(["localhost"])?;
/// assert!(hosts.allows(b"localhost:8545"));
/// assert!(hosts.allows(b"LOCALHOST"));
/// // Addresses are not names a page can rebind: always allowed.
/// assert!(hosts.allows(b"127.0.0.1:8545"));
/// assert!(hosts.allows(b"[::1]:8545"));
/// assert!(!hosts.allows(b"attacker.example"));
/// assert!(AllowedHosts::list(["*"])?.allows(b"attacker.example"));
/// # Ok::<(), rpcwire::server::hosts::InvalidHost>(())
/// ```
#[derive(Clone, Debug)]
pub struct AllowedHosts {
    /// `None`: any host. Names in lower case; IPv6 literals without
    /// brackets, in their shortest form.
    hosts: Option<Vec<Box<str>>>,
}

/// A name given to [`AllowedHosts::list`] that is not a host name: empty,
/// with a port (ports are not compared), or with bytes no host has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidHost(pub String);

impl std::fmt::Display for InvalidHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not a host name (localhost, 127.0.0.1, ::1, example.org; no port, no scheme): {:?}",
            self.0
        )
    }
}

impl std::error::Error for InvalidHost {}

impl AllowedHosts {
    /// Any host: the same as no check.
    pub fn any() -> AllowedHosts {
        AllowedHosts { hosts: None }
    }

    /// Only these host names (`localhost`, `127.0.0.1`, `::1` or `[::1]`,
    /// `node.example.org`), compared without regard to case or port.
    /// `"*"` in the list allows any.
    pub fn list<I, H>(hosts: I) -> Result<AllowedHosts, InvalidHost>
    where
        I: IntoIterator<Item = H>,
        H: AsRef<str>,
    {
        let mut list = Vec::new();
        for host in hosts {
            let given = host.as_ref().trim();
            if given == "*" {
                return Ok(AllowedHosts::any());
            }
            let bare = given
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(given);
            let plain = without_root_dot(bare.as_bytes());
            let name = if let Ok(v6) = bare.parse::<Ipv6Addr>() {
                v6.to_string()
            } else if !plain.is_empty()
                && plain
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            {
                String::from_utf8_lossy(plain).to_ascii_lowercase()
            } else {
                return Err(InvalidHost(given.to_owned()));
            };
            list.push(name.into());
        }
        Ok(AllowedHosts { hosts: Some(list) })
    }

    /// Whether any host is allowed (no check).
    pub fn is_any(&self) -> bool {
        self.hosts.is_none()
    }

    /// Whether a request for `host` (a `Host` header's value or a target's
    /// authority: `name`, `name:port`, `[v6]`, `[v6]:port`) is allowed:
    /// a listed name, or any IP address (DNS rebinding needs a name).
    pub fn allows(&self, host: &[u8]) -> bool {
        let Some(list) = &self.hosts else {
            return true;
        };
        match host_name(host) {
            Some(Name::Plain(name)) => {
                let name = without_root_dot(name);
                list.iter().any(|h| h.as_bytes().eq_ignore_ascii_case(name)) || is_ipv4(name)
            }
            Some(Name::V6) => true,
            None => false,
        }
    }
}

/// The last host [`AllowedHosts::allows`] accepted on one connection: a
/// client names the same host on every request, and comparing it with the
/// one before is a few instructions, where the check (the port, the list,
/// an IPv4 literal) took about 300.
#[cfg(feature = "http")]
#[derive(Clone, Copy)]
pub(crate) struct HostMemo {
    /// The length of the host kept; 0: none.
    len: u8,
    bytes: [u8; HostMemo::CAPACITY],
}

#[cfg(feature = "http")]
impl Default for HostMemo {
    fn default() -> Self {
        HostMemo {
            len: 0,
            bytes: [0; HostMemo::CAPACITY],
        }
    }
}

#[cfg(feature = "http")]
impl HostMemo {
    /// Longer hosts are checked every time.
    const CAPACITY: usize = 63;

    /// [`AllowedHosts::allows`] for a valid `Host` value
    /// ([`is_host_value`]), remembering the last host it allowed.
    pub(crate) fn allows(&mut self, hosts: &AllowedHosts, host: &[u8]) -> bool {
        let kept = usize::from(self.len);
        if kept != 0 && kept == host.len() && self.bytes[..kept] == *host {
            return true;
        }
        let allowed = is_host_value(host) && hosts.allows(host);
        if allowed && !host.is_empty() && host.len() <= Self::CAPACITY {
            self.bytes[..host.len()].copy_from_slice(host);
            self.len = host.len() as u8;
        }
        allowed
    }
}

/// Whether `req` is a request a server must answer `400` for its `Host`
/// (RFC 9112 §3.2), allowlist or not: an HTTP/1.1 request without one, and
/// a request of any HTTP/1 version with more than one or one whose value is
/// not `uri-host [ ":" port ]` (the RFC's "invalid field value"). The one
/// rule every server of rpcwire's applies (its own HTTP/1.1 loop hands such
/// a request to hyper's path, which applies it; a WebSocket server to its
/// opening handshakes; MCP's Streamable HTTP server), as Go's net/http
/// (geth's) does. HTTP/1.0 needs no `Host`, and HTTP/2 names the host in
/// `:authority`.
pub(crate) fn lacks_one_host<B>(req: &http::Request<B>) -> bool {
    if req.version() > http::Version::HTTP_11 {
        return false;
    }
    let mut named = req.headers().get_all(http::header::HOST).iter();
    match (named.next(), named.next()) {
        (None, _) => req.version() == http::Version::HTTP_11,
        (Some(host), None) => !is_host_value(host.as_bytes()),
        (Some(_), Some(_)) => true,
    }
}

/// Whether `value` is a `Host` field's value as RFC 9112 §3.2 defines it:
/// `uri-host [ ":" port ]` (RFC 3986: an IP literal in brackets, or a
/// reg-name of unreserved characters, sub-delimiters and `%` escapes,
/// which an IPv4 address is too; the port digits), or empty. A space, a
/// second `:` outside brackets, `@`, `/` or a control byte make it
/// invalid.
pub(crate) fn is_host_value(value: &[u8]) -> bool {
    fn plain(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b)
    }
    let (host, port) = if let Some(inner) = value.strip_prefix(b"[") {
        let Some(close) = inner.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &inner[..close];
        if literal.is_empty() || !literal.iter().all(|&b| plain(b) || b == b':') {
            return false;
        }
        (&[][..], &inner[close + 1..])
    } else {
        let colon = value.iter().position(|&b| b == b':').unwrap_or(value.len());
        (&value[..colon], &value[colon..])
    };
    let port_ok = match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    };
    let mut rest = host;
    while let Some((&b, tail)) = rest.split_first() {
        rest = if b == b'%' {
            match tail {
                [h, l, more @ ..] if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() => more,
                _ => return false,
            }
        } else if plain(b) {
            tail
        } else {
            return false;
        };
    }
    port_ok
}

/// Why [`AllowedHosts::refuses`] refuses a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal<'r> {
    /// Its host, not listed: `403`.
    NotListed(&'r [u8]),
    /// HTTP/1.1 without exactly one valid `Host` (RFC 9112 §3.2): `400`.
    NoOneHost,
}

impl AllowedHosts {
    /// Why `req` (an HTTP request, or a WebSocket opening handshake) is
    /// refused, or `None` when it may be served: first [`lacks_one_host`]
    /// (so that `AllowedHosts::any().refuses` is that rule alone), then
    /// the host, its target's authority (HTTP/2's `:authority`, an
    /// absolute-form target), else its `Host` (over HTTP/2, a `Host` sent
    /// with `:authority` must be allowed too). An HTTP/1.0 or HTTP/2
    /// request naming none is served: no browser sends one, so it cannot
    /// be a rebound page's.
    pub(crate) fn refuses<'r, B>(&self, req: &'r http::Request<B>) -> Option<Refusal<'r>> {
        if lacks_one_host(req) {
            return Some(Refusal::NoOneHost);
        }
        if self.is_any() {
            return None;
        }
        let mut named = req.headers().get_all(http::header::HOST).iter();
        let (first, more) = (named.next(), named.next().is_some());
        let host = match req.uri().authority() {
            // HTTP/2 with a `Host` too: a server "SHOULD treat a request as
            // malformed" when they differ (RFC 9113 §8.3.1); a handler
            // reading `Host` must not see a host the list never allowed.
            // (An HTTP/1.1 absolute-form target's `Host` is ignored, RFC
            // 9112 §3.2.2.)
            Some(_)
                if req.version() == http::Version::HTTP_2
                    && let Some(named) = req
                        .headers()
                        .get_all(http::header::HOST)
                        .iter()
                        .find(|h| !self.allows(h.as_bytes())) =>
            {
                return Some(Refusal::NotListed(named.as_bytes()));
            }
            Some(authority) => authority.as_str().as_bytes(),
            None if more => return Some(Refusal::NoOneHost),
            None => first?.as_bytes(),
        };
        (!self.allows(host)).then_some(Refusal::NotListed(host))
    }
}

/// Whether `name` is an IPv4 address in dotted form (`127.0.0.1`), as
/// `Ipv4Addr`'s parser reads one: four decimal parts of one to three
/// digits, each at most 255, none with a leading zero. Checked by hand:
/// the gateway checks every request's `Host`, and std's parser cost ~450
/// instructions per request there (2.5% of a forwarded request; its
/// answers are compared with std's in the tests).
fn is_ipv4(name: &[u8]) -> bool {
    let mut parts = 0;
    for part in name.split(|&b| b == b'.') {
        parts += 1;
        let canonical = match part {
            [d] => d.is_ascii_digit(),
            [b'1'..=b'9', d] => d.is_ascii_digit(),
            [b'1', d, e] => d.is_ascii_digit() && e.is_ascii_digit(),
            [b'2', b'0'..=b'4', d] => d.is_ascii_digit(),
            [b'2', b'5', b'0'..=b'5'] => true,
            _ => false,
        };
        if !canonical || parts > 4 {
            return false;
        }
    }
    parts == 4
}

/// A name without the root's trailing dot: `localhost.` is the fully
/// qualified form of `localhost`, the same host to DNS.
fn without_root_dot(name: &[u8]) -> &[u8] {
    match name {
        [rest @ .., b'.'] if !rest.is_empty() => rest,
        _ => name,
    }
}

/// A host's name without its port.
enum Name<'a> {
    Plain(&'a [u8]),
    /// An IPv6 literal (any is allowed: rebinding needs a name).
    V6,
}

/// `host`'s name, or `None` when it is not `name[:port]` or `[v6][:port]`
/// (a port being digits, possibly none, as RFC 3986 allows).
fn host_name(host: &[u8]) -> Option<Name<'_>> {
    let port_ok = |port: &[u8]| port.iter().all(u8::is_ascii_digit);
    if let Some(rest) = host.strip_prefix(b"[") {
        let end = rest.iter().position(|&b| b == b']')?;
        let (inside, after) = (&rest[..end], &rest[end + 1..]);
        if !after.is_empty() && !after.strip_prefix(b":").is_some_and(port_ok) {
            return None;
        }
        std::str::from_utf8(inside).ok()?.parse::<Ipv6Addr>().ok()?;
        return Some(Name::V6);
    }
    let (name, port) = match host.iter().position(|&b| b == b':') {
        Some(i) => (&host[..i], &host[i + 1..]),
        None => (host, &b""[..]),
    };
    (!name.is_empty() && port_ok(port)).then_some(Name::Plain(name))
}

/// The body of the `403` for a request whose host is not listed.
pub(crate) fn forbidden_body(host: &[u8]) -> String {
    let host = String::from_utf8_lossy(host);
    let host = serde_json::to_string(&host).unwrap_or_else(|_| "null".into());
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32600,\"message\":\"Invalid Request\",\
         \"data\":{{\"reason\":\"host not allowed\",\"host\":{host}}}}}}}"
    )
}

/// The body of the `400` for an HTTP/1.1 request without one valid `Host` (see
/// [`lacks_one_host`]).
pub(crate) const NO_HOST_BODY: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"reason":"an HTTP/1.1 request needs exactly one Host header, with a valid host"}}}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_answers_as_the_list_does() {
        let long = format!("{}.example", "a".repeat(70));
        let hosts = AllowedHosts::list(["localhost", long.as_str()]).unwrap();
        let mut memo = HostMemo::default();
        // A connection's hosts in turn: remembered or not, each answered
        // as the list answers it.
        let turns: Vec<Vec<u8>> = [
            "",
            "localhost:8545",
            "localhost:8545",
            "evil.example",
            "evil.example",
            "localhost:8545",
            "LOCALHOST:8545",
            "localhost:8546",
            "",
            "localhost:8546x",
            &long,
            &long,
            &format!("{long}:1"),
            "127.0.0.1",
            "127.0.0.1:1",
            "evil.example",
        ]
        .iter()
        .map(|h| h.as_bytes().to_vec())
        .collect();
        for host in &turns {
            assert_eq!(
                memo.allows(&hosts, host),
                hosts.allows(host),
                "{:?}",
                String::from_utf8_lossy(host)
            );
        }
        assert!(!memo.allows(&hosts, b""));
    }

    #[test]
    fn names_are_checked_when_given() {
        for bad in [
            "",
            "localhost:8545",
            "http://localhost",
            "a b",
            "[::1]:8545",
            "[::1",
            "a/b",
        ] {
            assert_eq!(
                AllowedHosts::list([bad]).unwrap_err(),
                InvalidHost(bad.into()),
                "{bad:?}"
            );
        }
        assert!(AllowedHosts::list(["a.org", "*"]).unwrap().is_any());
        assert!(!AllowedHosts::list(["a.org"]).unwrap().is_any());
    }

    #[test]
    fn hosts_match_without_port_or_case() {
        let hosts = AllowedHosts::list([
            "Localhost",
            "127.0.0.1",
            "[0:0:0:0:0:0:0:1]",
            "node.example.org.",
        ])
        .unwrap();
        for good in [
            &b"localhost"[..],
            // The fully qualified forms name the same hosts.
            b"localhost.",
            b"localhost.:8545",
            b"node.example.org",
            b"node.example.org.:443",
            b"LOCALHOST:8545",
            b"localhost:",
            b"127.0.0.1:1",
            b"[::1]",
            b"[::1]:8545",
            b"[0::1]:80",
            // Addresses, listed or not.
            b"[::2]:8545",
            b"127.0.0.2",
            b"192.0.2.7:8545",
        ] {
            assert!(hosts.allows(good), "{}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b""[..],
            b":8545",
            b"localhost.attacker.example",
            b"localhost..",
            b".",
            b"attacker.example:8545",
            b"localhost:85x",
            b"localhost:8545:1",
            b"[::1]x",
            b"[::1",
            b"::1",
            // Not addresses: names (a page can rebind them).
            b"127.0.0.256",
            b"127.1",
            b"0x7f.0.0.1",
            b"1.2.3.4.example",
        ] {
            assert!(!hosts.allows(bad), "{}", String::from_utf8_lossy(bad));
        }
        let v6 = AllowedHosts::list(["::1"]).unwrap();
        assert!(v6.allows(b"[::1]:8545"));
    }

    /// The hand-written check says what std's parser says, on every
    /// string of up to seven characters over digits and dots, and on
    /// longer ones built from parts near the edges.
    #[test]
    fn ipv4_check_agrees_with_std() {
        let std_says = |s: &[u8]| {
            std::str::from_utf8(s).is_ok_and(|s| s.parse::<std::net::Ipv4Addr>().is_ok())
        };
        let alphabet = b"0125.9";
        let mut s = Vec::new();
        let mut count = 0;
        fn each(s: &mut Vec<u8>, alphabet: &[u8], left: usize, f: &mut dyn FnMut(&[u8])) {
            f(s);
            if left == 0 {
                return;
            }
            for &c in alphabet {
                s.push(c);
                each(s, alphabet, left - 1, f);
                s.pop();
            }
        }
        each(&mut s, alphabet, 7, &mut |s| {
            count += 1;
            assert_eq!(is_ipv4(s), std_says(s), "{}", String::from_utf8_lossy(s));
        });
        assert!(count > 300_000);
        let parts = [
            "0", "00", "01", "1", "9", "10", "99", "099", "100", "199", "200", "249", "250", "255",
            "256", "260", "300", "999", "1000", "0255", "", "a", "+1", "-1", " 1",
        ];
        for a in parts {
            for b in ["0", "255", "256", "01"] {
                for shape in [
                    format!("{a}.{b}.{b}.{a}"),
                    format!("{b}.{a}.{a}.{b}"),
                    format!("{a}.{a}.{a}"),
                    format!("{a}.{a}.{a}.{a}.{a}"),
                    format!("{a}.{b}.{a}.{b}."),
                ] {
                    let s = shape.as_bytes();
                    assert_eq!(is_ipv4(s), std_says(s), "{shape}");
                }
            }
        }
    }

    /// With no allowlist, the refusal is the RFC's rule alone: HTTP/1.1
    /// needs exactly one `Host`, other versions none, and no name is
    /// refused.
    #[test]
    fn without_a_list_only_http11_without_one_host_is_refused() {
        let request = |version, hosts: &[&str]| {
            let mut r = http::Request::builder().uri("/").version(version);
            for h in hosts {
                r = r.header("host", *h);
            }
            r.body(()).unwrap()
        };
        let any = AllowedHosts::any();
        let v11 = http::Version::HTTP_11;
        for (version, hosts, refused) in [
            (v11, &[][..], true),
            (v11, &["a.example", "a.example"][..], true),
            (v11, &["attacker.example"][..], false),
            (v11, &["a b"][..], true),
            (v11, &["a.example:8545"][..], false),
            (v11, &["a.example:85x"][..], true),
            (v11, &["[::1]:8545"][..], false),
            (v11, &[""][..], false),
            (http::Version::HTTP_10, &[][..], false),
            (http::Version::HTTP_10, &["a", "b"][..], true),
            (http::Version::HTTP_10, &["a b"][..], true),
            (http::Version::HTTP_10, &["a.example"][..], false),
            (http::Version::HTTP_2, &[][..], false),
        ] {
            let req = request(version, hosts);
            assert_eq!(lacks_one_host(&req), refused, "{version:?} {hosts:?}");
            let why = any.refuses(&req);
            assert_eq!(
                why,
                refused.then_some(Refusal::NoOneHost),
                "{version:?} {hosts:?}"
            );
        }
    }

    #[test]
    fn host_values_follow_the_rfc_grammar() {
        for good in [
            "",
            "localhost",
            "localhost:",
            "127.0.0.1:8545",
            "a-b.example_1~",
            "x,y",
            "%41.example",
            "[::1]",
            "[::ffff:127.0.0.1]:80",
            "[v1.fe80::a+en1]",
        ] {
            assert!(is_host_value(good.as_bytes()), "{good:?}");
        }
        for bad in [
            "a b",
            "x, y",
            " a",
            "a:b:c",
            "a:80:80",
            "a:-1",
            "user@a",
            "a/b",
            "a%4",
            "a%zz",
            "[::1",
            "[]",
            "[::1]x",
            "[::1]:8x",
            "[a b]",
            "a\tb",
            "\u{e9}.example",
        ] {
            assert!(!is_host_value(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn the_refusal_names_the_host_as_json() {
        let body = forbidden_body(b"a\"b.example");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], -32600);
        assert_eq!(v["error"]["data"]["host"], "a\"b.example");
        let v: serde_json::Value = serde_json::from_str(NO_HOST_BODY).unwrap();
        assert_eq!(v["error"]["code"], -32600);
    }
}
