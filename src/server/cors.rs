//! Which web pages may call a server from a browser: CORS for HTTP, the
//! `Origin` check for WebSocket upgrades (features `http`, `ws`).
//!
//! A browser sends a script's cross-origin `POST` of `application/json`
//! only after a preflight (`OPTIONS` with `Origin` and
//! `Access-Control-Request-Method`) was answered with the page's origin
//! allowed, and lets the script read the reply only when it carries
//! `Access-Control-Allow-Origin`. A dapp calling a node or gateway
//! straight from the page needs both, as geth's `--http.corsdomain` and
//! anvil give. WebSocket upgrades are not preflighted: the browser sends
//! its page's `Origin` and leaves the check to the server (geth's
//! `--ws.origins`).
//!
// The links to the other transport's items resolve only where it is built
// (docs of `ws` or `http` alone must not break).
#![cfg_attr(
    feature = "http",
    doc = "With a [`Cors`] set on [`HttpService::cors`](super::http::HttpService::cors):"
)]
#![cfg_attr(
    not(feature = "http"),
    doc = "With a [`Cors`] set on `HttpService::cors` (feature `http`):"
)]
//!
//! | request | answer |
//! | --- | --- |
//! | no `Origin` (curl, servers, other nodes) | as without CORS (plus `Vary: Origin` when origins are listed, as on every answer then: a cache between browsers and the server must not hand one origin's answer to another) |
//! | `OPTIONS` preflight from an allowed origin | `204`, `Access-Control-Allow-Origin`, `-Allow-Methods: POST, OPTIONS`, `-Allow-Headers` (those asked for), `-Max-Age` |
//! | a request from an allowed origin | as without CORS, plus `Access-Control-Allow-Origin` (and `Vary: Origin` unless any origin is allowed) |
//! | a preflight or WebSocket upgrade from any other origin | `403`, a -32600 body naming the origin |
//! | a request from any other origin | as without CORS (and `Vary: Origin`): no `Access-Control-Allow-Origin`, so a browser does not let the page read it (a page cannot send it without a preflight, refused above; browser extensions, which send their own `Origin` and are not held to CORS, are served as other clients, as geth serves them) |
//!
//! Without one (the default), `Origin` is ignored and `OPTIONS` gets `405`,
//! as before.
//!
#![cfg_attr(
    feature = "ws",
    doc = "A [`WsServer`](super::ws::WsServer) given one with [`origins`](super::ws::WsServer::origins)"
)]
#![cfg_attr(
    not(feature = "ws"),
    doc = "A `WsServer` (feature `ws`) given one with `origins`"
)]
//! refuses opening handshakes
//! from other origins with `403` (handshakes without `Origin`, from
//! programs rather than pages, are accepted); on a port serving both
//! (`server::combined`), an upgrade must pass the HTTP service's policy and
//! the WebSocket server's.

use std::time::Duration;

use http::HeaderValue;

/// The origins allowed to call a server from a browser, and how long a
/// browser may remember a preflight's answer.
///
/// ```
/// use rpcwire::server::cors::Cors;
/// let cors = Cors::origins(["https://app.example.org", "http://localhost:3000"])?;
/// assert!(cors.allows(b"https://app.example.org"));
/// assert!(!cors.allows(b"https://evil.example"));
/// assert!(Cors::any().allows(b"https://anything.example"));
/// # Ok::<(), rpcwire::server::cors::InvalidOrigin>(())
/// ```
#[derive(Clone, Debug)]
pub struct Cors {
    /// `None`: any origin.
    origins: Option<Vec<Box<[u8]>>>,
    max_age: HeaderValue,
}

/// An origin given to [`Cors::origins`] that is not one: not of the form
/// `scheme://host[:port]` in visible ASCII, or with a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidOrigin(pub String);

impl std::fmt::Display for InvalidOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not a web origin (scheme://host[:port], no path): {:?}",
            self.0
        )
    }
}

impl std::error::Error for InvalidOrigin {}

/// How long browsers keep a preflight's answer unless told otherwise: one
/// preflight per page per ten minutes, not one per call.
const DEFAULT_MAX_AGE: Duration = Duration::from_secs(600);

impl Cors {
    /// Any page may call (`Access-Control-Allow-Origin: *`), as anvil
    /// allows by default. Fine for public, read-only endpoints; a server
    /// that holds keys or answers only its own front end should list its
    /// origins instead.
    pub fn any() -> Cors {
        Cors {
            origins: None,
            max_age: max_age_value(DEFAULT_MAX_AGE),
        }
    }

    /// Only pages of these origins may call (each as a browser sends it:
    /// `https://app.example.org`, `http://localhost:3000`; compared
    /// without regard to case; a scheme's default port, which browsers
    /// leave out, is dropped: `https://app.example.org:443` is
    /// `https://app.example.org`; a port is a number: `:03000` is `:3000`,
    /// and one past 65535 is refused; an IPv6 literal in any of its forms:
    /// `http://[0:0::1]:8545` is `http://[::1]:8545`). `"*"` in the list
    /// allows any.
    pub fn origins<I, O>(origins: I) -> Result<Cors, InvalidOrigin>
    where
        I: IntoIterator<Item = O>,
        O: AsRef<str>,
    {
        let mut list = Vec::new();
        for origin in origins {
            let origin = origin.as_ref().trim();
            if origin == "*" {
                return Ok(Cors::any());
            }
            let Some(origin) = is_origin(origin)
                .then(|| as_browsers_write(origin))
                .flatten()
                .and_then(|o| with_port_as_a_number(&o))
            else {
                return Err(InvalidOrigin(origin.to_owned()));
            };
            list.push(without_default_port(&origin).as_bytes().into());
        }
        Ok(Cors {
            origins: Some(list),
            max_age: max_age_value(DEFAULT_MAX_AGE),
        })
    }

    /// How long a browser may reuse a preflight's answer
    /// (`Access-Control-Max-Age`, whole seconds; default 600 s).
    pub fn max_age(mut self, max_age: Duration) -> Cors {
        self.max_age = max_age_value(max_age);
        self
    }

    /// Whether a page of `origin` (an `Origin` header's value) may call.
    pub fn allows(&self, origin: &[u8]) -> bool {
        match &self.origins {
            None => true,
            Some(list) => list.iter().any(|o| o.eq_ignore_ascii_case(origin)),
        }
    }

    /// Whether a request with these headers comes from a page whose origin
    /// may not call: its `Origin`, then.
    #[cfg_attr(not(feature = "ws"), allow(dead_code))]
    pub(crate) fn refuses<'h>(&self, headers: &'h http::HeaderMap) -> Option<&'h HeaderValue> {
        let origin = headers.get(http::header::ORIGIN)?;
        (!self.allows(origin.as_bytes())).then_some(origin)
    }

    /// The `Access-Control-Allow-Origin` for a request from `origin`, or
    /// `None` when that origin may not call.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn allow_origin(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        match &self.origins {
            None => Some(HeaderValue::from_static("*")),
            Some(_) if self.allows(origin.as_bytes()) => Some(origin.clone()),
            Some(_) => None,
        }
    }

    /// Whether answers depend on the request's `Origin` (then they say so
    /// with `Vary: Origin`, for caches between browser and server).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn varies(&self) -> bool {
        self.origins.is_some()
    }

    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn max_age_header(&self) -> &HeaderValue {
        &self.max_age
    }
}

fn max_age_value(max_age: Duration) -> HeaderValue {
    HeaderValue::from(max_age.as_secs())
}

/// `scheme://host[:port]`: what a browser puts in `Origin` (or `null`,
/// which no list should allow by accident and so is not accepted here).
fn is_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    // A port, if any, is digits: `https://a.org:` or a user part
    // (`https://u@a.org`, refused below) would match nothing a browser
    // sends.
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let port_ok = match rest.strip_prefix('[') {
        // An IPv6 literal: `[::1]` or `[::1]:8545`.
        Some(v6) => match v6.split_once(']') {
            Some((_, "")) => true,
            Some((_, after)) => after.strip_prefix(':').is_some_and(digits),
            None => false,
        },
        None => match rest.split_once(':') {
            Some((host, port)) => !host.is_empty() && digits(port),
            None => true,
        },
    };
    !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        && !rest.is_empty()
        && port_ok
        && rest
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'/' | b'?' | b'#' | b'@'))
}

/// `origin` (checked by [`is_origin`]) with its port, if any, written as a
/// browser writes it: a number without leading zeros (`:03000` is
/// `:3000`, `:0443` is `:443`, which [`without_default_port`] then
/// drops). `None` for a port past 65535.
fn with_port_as_a_number(origin: &str) -> Option<String> {
    let (scheme, rest) = origin.split_once("://")?;
    let host_end = match rest.strip_prefix('[') {
        Some(v6) => v6.find(']')? + 2,
        None => rest.find(':').unwrap_or(rest.len()),
    };
    let (host, port) = rest.split_at(host_end);
    match port.strip_prefix(':') {
        Some(digits) => {
            let port: u16 = digits.parse().ok()?;
            Some(format!("{scheme}://{host}:{port}"))
        }
        None => Some(origin.to_owned()),
    }
}

/// `origin` without its scheme's default port: browsers serialize an
/// origin without it, so a listed `https://a.org:443` would otherwise
/// match no `Origin` ever sent.
fn without_default_port(origin: &str) -> &str {
    let default = match origin
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase())
    {
        Some(s) if s == "http" || s == "ws" => ":80",
        Some(s) if s == "https" || s == "wss" => ":443",
        _ => return origin,
    };
    origin.strip_suffix(default).unwrap_or(origin)
}

/// `origin` as a browser writes it in `Origin`: an IPv6 literal in the
/// URL standard's form (`http://[0:0::1]` is sent as `http://[::1]`, hex
/// in lower case, the first longest run of zero groups compressed, never
/// dotted), the rest as given. `None` for a bracketed host that is not an
/// IPv6 address.
fn as_browsers_write(origin: &str) -> Option<std::borrow::Cow<'_, str>> {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return Some(origin.into());
    };
    let Some((inside, after)) = rest.strip_prefix('[').and_then(|r| r.split_once(']')) else {
        return Some(origin.into());
    };
    let groups = inside.parse::<std::net::Ipv6Addr>().ok()?.segments();
    // The longest run of at least two zero groups, the first of equals.
    let (mut best, mut run) = ((0, 0), (0, 0));
    for (i, &g) in groups.iter().enumerate() {
        run = if g == 0 {
            (run.0, i + 1)
        } else {
            (i + 1, i + 1)
        };
        if run.1 - run.0 > best.1 - best.0 {
            best = run;
        }
    }
    let hex = |gs: &[u16]| {
        gs.iter()
            .map(|g| format!("{g:x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let host = if best.1 - best.0 >= 2 {
        format!("{}::{}", hex(&groups[..best.0]), hex(&groups[best.1..]))
    } else {
        hex(&groups)
    };
    Some(format!("{scheme}://[{host}]{after}").into())
}

/// The body of the `403` for a request from an origin that may not call.
pub(crate) fn forbidden_body(origin: &HeaderValue) -> String {
    let origin = String::from_utf8_lossy(origin.as_bytes());
    let origin = serde_json::to_string(&origin).unwrap_or_else(|_| "null".into());
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32600,\"message\":\"Invalid Request\",\
         \"data\":{{\"reason\":\"origin not allowed\",\"origin\":{origin}}}}}}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked_when_given() {
        for bad in [
            "",
            "example.org",
            "https://",
            "https://a.org/",
            "null",
            "https://a b",
            "https://a.org:",
            "https://u@a.org",
            "https://a.org:80:80",
            "http://[::1",
            "http://[localhost]",
            "http://[::1::2]:80",
            "http://localhost:65536",
            "http://[::1]:99999",
        ] {
            assert_eq!(
                Cors::origins([bad]).unwrap_err(),
                InvalidOrigin(bad.into()),
                "{bad:?}"
            );
        }
        let cors = Cors::origins(["https://A.org", "http://localhost:3000"]).unwrap();
        assert!(cors.allows(b"https://a.org"));
        assert!(cors.allows(b"http://localhost:3000"));
        assert!(!cors.allows(b"http://localhost:3001"));
        assert!(!cors.allows(b"https://a.org.evil.example"));
        assert!(!cors.allows(b"null"));
        let v6 = Cors::origins(["http://[::1]:8545", "http://[::1]"]).unwrap();
        assert!(v6.allows(b"http://[::1]:8545") && v6.allows(b"http://[::1]"));
        // Listed in any form, matched in the one browsers send.
        let v6 = Cors::origins([
            "http://[0:0:0:0:0:0:0:1]:8545",
            "https://[2001:DB8:0:0:1:0:0:1]:443",
            "http://[::ffff:192.0.2.1]",
            "http://[1:0:2:0:3:0:4:0]",
            "http://[0:0:1:0:0:0:0:0]",
        ])
        .unwrap();
        for sent in [
            "http://[::1]:8545",
            "https://[2001:db8::1:0:0:1]",
            "http://[::ffff:c000:201]",
            "http://[1:0:2:0:3:0:4:0]",
            "http://[0:0:1::]",
        ] {
            assert!(v6.allows(sent.as_bytes()), "{sent}");
        }
        assert!(!v6.allows(b"http://[::1]:8546"));
        // Ports as browsers write them: numbers, the default one left out.
        let zeros = Cors::origins([
            "http://localhost:03000",
            "https://a.org:0443",
            "http://[::1]:08545",
            "http://b.org:00",
        ])
        .unwrap();
        for sent in [
            "http://localhost:3000",
            "https://a.org",
            "http://[::1]:8545",
            "http://b.org:0",
        ] {
            assert!(zeros.allows(sent.as_bytes()), "{sent}");
        }
        assert!(!zeros.allows(b"http://localhost:03000"));
        assert!(
            Cors::origins(["https://a.org", "*"])
                .unwrap()
                .allows(b"null")
        );
    }

    #[test]
    fn allow_origin_echoes_a_listed_origin_and_stars_any() {
        let listed = Cors::origins(["https://a.org"]).unwrap();
        let origin = HeaderValue::from_static("https://a.org");
        assert_eq!(listed.allow_origin(&origin), Some(origin.clone()));
        assert!(listed.varies());
        assert_eq!(
            listed.allow_origin(&HeaderValue::from_static("https://b.org")),
            None
        );
        assert_eq!(
            Cors::any().allow_origin(&origin),
            Some(HeaderValue::from_static("*"))
        );
        assert!(!Cors::any().varies());
        let mut headers = http::HeaderMap::new();
        assert_eq!(listed.refuses(&headers), None);
        headers.insert(http::header::ORIGIN, origin.clone());
        assert_eq!(listed.refuses(&headers), None);
        headers.insert(
            http::header::ORIGIN,
            HeaderValue::from_static("https://b.org"),
        );
        assert_eq!(listed.refuses(&headers).unwrap(), "https://b.org");
        assert_eq!(
            Cors::any()
                .max_age(Duration::from_millis(90_500))
                .max_age_header(),
            "90"
        );
    }

    #[test]
    fn the_refusal_names_the_origin_as_json() {
        let body = forbidden_body(&HeaderValue::from_static("https://\"x\".org"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], -32600);
        assert_eq!(v["error"]["data"]["origin"], "https://\"x\".org");
    }
}
