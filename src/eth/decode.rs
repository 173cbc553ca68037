//! The decoders: [`EthValue`] over any [`RawJson`], [`Param`] and
//! [`EthParams`] for a method's positional params, [`Hex`] for DATA, and
//! the error they all return, [`Invalid`].

use core::fmt;

use alloy_primitives::{Address, B256, Bytes, U256};
use bumpalo::Bump;

use super::block::{BlockId, BlockNumberOrTag};
use super::call::CallRequest;
use super::filter::LogFilter;
use super::hex;
use super::walk::{self, Elements};
use crate::dispatch::RpcError;
use crate::json::{Kind, RawJson};
use crate::request::Params;

/// Why a value was refused. Private: the public face is
/// [`Invalid::reason`]'s text, which may gain cases without breaking
/// anyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    NotString,
    MissingPrefix,
    EmptyQuantity,
    LeadingZeros,
    InvalidDigit,
    OddLength,
    /// A DATA value of the wrong size (the expected byte count is kept in
    /// [`Invalid`]).
    Length,
    Overflow8,
    Overflow64,
    Overflow128,
    Overflow256,
    /// A storage key of more than 64 hex digits (geth: "hex string too
    /// long"), whatever its value.
    KeyTooLong,
    NotBool,
    NotBlockId,
    NotBlockNumber,
    NotObject,
    NotArray,
    NotAddresses,
    NotTopics,
    UnknownMember,
    DuplicateMember,
    HashAndNumber,
    CanonicalWithNumber,
    NoBlock,
    HashWithRange,
    TooManyTopics,
    DataInputDiffer,
    Missing,
    TooMany,
    NotPositional,
    BadEscape,
    /// An object of 4 GiB or more, which a view cannot index.
    ObjectTooLarge,
}

impl Reason {
    fn text(self) -> &'static str {
        match self {
            Reason::NotString => "not a string",
            Reason::MissingPrefix => "missing 0x prefix",
            Reason::EmptyQuantity => "empty quantity (zero is 0x0)",
            Reason::LeadingZeros => "leading zeros",
            Reason::InvalidDigit => "invalid hex digit",
            Reason::OddLength => "odd number of hex digits",
            Reason::Length => "wrong length",
            Reason::Overflow8 => "more than 8 bits",
            Reason::Overflow64 => "more than 64 bits",
            Reason::Overflow128 => "more than 128 bits",
            Reason::Overflow256 => "more than 256 bits",
            Reason::KeyTooLong => "more than 64 hex digits",
            Reason::NotBool => "not a boolean",
            Reason::NotBlockId => "not a block tag, number, hash or EIP-1898 object",
            Reason::NotBlockNumber => "not a block tag or number",
            Reason::NotObject => "not an object",
            Reason::NotArray => "not an array",
            Reason::NotAddresses => "not an address or an array of addresses",
            Reason::NotTopics => "not an array of topics",
            Reason::UnknownMember => "unknown member",
            Reason::DuplicateMember => "duplicate member",
            Reason::HashAndNumber => "both blockHash and blockNumber",
            Reason::CanonicalWithNumber => "requireCanonical without blockHash",
            Reason::NoBlock => "neither blockHash nor blockNumber",
            Reason::HashWithRange => "blockHash together with fromBlock or toBlock",
            Reason::TooManyTopics => "more than 4 topic positions",
            Reason::DataInputDiffer => "data and input both set and different",
            Reason::Missing => "missing value",
            Reason::TooMany => "too many params",
            Reason::NotPositional => "params must be an array",
            Reason::BadEscape => "invalid escape",
            Reason::ObjectTooLarge => "object of 4 GiB or more",
        }
    }
}

/// A value the Ethereum decoders refused: why, what was received, and
/// where it sits (the parameter's name and position, and the member of an
/// object param), so that the -32602 reply tells the client what to fix.
///
/// Small and `Copy`, borrowing the message; nothing is formatted until the
/// error becomes an [`RpcError`] (`?` in a handler does that):
///
/// ```
/// use rpcwire::eth::EthParams;
///
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97","0x01"]}"#, &arena).unwrap();
/// let params = msg.into_single().unwrap().request().unwrap().params();
/// let mut p = EthParams::new(params);
/// p.required("address")?.address()?;
/// let e = p.required("blockNumber")?.block_id().unwrap_err();
/// assert_eq!(e.reason(), "leading zeros");
/// let e = rpcwire::RpcError::from(e);
/// assert_eq!(e.code(), -32602);
/// assert_eq!(
///     e.data(),
///     Some(r#"{"param":"blockNumber","position":1,"reason":"leading zeros","received":"0x01"}"#)
/// );
/// # Ok::<(), rpcwire::RpcError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Invalid<'a> {
    reason: Reason,
    /// For [`Reason::Length`]: the byte count expected.
    expected: u32,
    received: Option<RawJson<'a>>,
    param: Option<&'static str>,
    position: Option<u32>,
    field: Option<&'static str>,
}

impl<'a> Invalid<'a> {
    #[inline(never)]
    #[cold]
    pub(crate) fn new(reason: Reason, received: RawJson<'a>) -> Self {
        Invalid {
            reason,
            expected: 0,
            received: Some(received),
            param: None,
            position: None,
            field: None,
        }
    }

    #[cold]
    pub(crate) fn length(expected: usize, received: RawJson<'a>) -> Self {
        Invalid {
            expected: expected as u32,
            ..Invalid::new(Reason::Length, received)
        }
    }

    #[cold]
    pub(crate) fn absent(reason: Reason) -> Self {
        Invalid {
            reason,
            expected: 0,
            received: None,
            param: None,
            position: None,
            field: None,
        }
    }

    /// Names the member of an object param the value came from (kept if
    /// already set: the innermost name wins).
    #[cold]
    pub(crate) fn in_field(mut self, field: &'static str) -> Self {
        self.field.get_or_insert(field);
        self
    }

    /// Names the parameter the value came from, and its position among the
    /// params.
    #[cold]
    pub fn at(mut self, param: &'static str, position: usize) -> Self {
        self.param = Some(param);
        self.position = Some(position as u32);
        self
    }

    /// Places the error at `site`, when there is one.
    #[cold]
    pub(crate) fn at_site(self, site: Site) -> Self {
        match site.param {
            Some(param) => self.at(param, site.position as usize),
            None => self,
        }
    }

    /// Why the value was refused: a short phrase such as `"leading zeros"`
    /// or `"missing 0x prefix"`.
    pub fn reason(&self) -> &'static str {
        self.reason.text()
    }

    /// The value that was refused, if there was one (a missing parameter
    /// has none); for an unknown member of an object, the member's name
    /// (a JSON string), which is what the client must fix.
    pub fn received(&self) -> Option<RawJson<'a>> {
        self.received
    }

    /// The parameter's name, when the value was read through [`Param`].
    pub fn param(&self) -> Option<&'static str> {
        self.param
    }

    /// The parameter's position among the params (from 0).
    pub fn position(&self) -> Option<usize> {
        self.position.map(|p| p as usize)
    }

    /// The member of an object param (`"gas"` in a call object), if the
    /// value was one.
    pub fn field(&self) -> Option<&'static str> {
        self.field
    }

    /// For a DATA value of the wrong size: the byte count expected.
    pub fn expected_len(&self) -> Option<usize> {
        (self.reason == Reason::Length).then_some(self.expected as usize)
    }

    /// The -32602 error a client gets, `data` naming the parameter, e.g.
    /// `{"param":"blockNumber","position":1,"reason":"leading zeros","received":"0x01"}`.
    /// A long received value is cut to its first 64 characters, marked
    /// with `…`, and its size is given in `"receivedLength"`.
    pub fn to_rpc_error(&self) -> RpcError {
        let mut data = Vec::with_capacity(128);
        data.push(b'{');
        let mut sep = "";
        if let Some(param) = self.param {
            data.extend_from_slice(b"\"param\":");
            crate::write::string(&mut data, param);
            sep = ",";
        }
        if let Some(position) = self.position {
            data.extend_from_slice(sep.as_bytes());
            data.extend_from_slice(b"\"position\":");
            crate::write::u64(&mut data, position as u64);
            sep = ",";
        }
        if let Some(field) = self.field {
            data.extend_from_slice(sep.as_bytes());
            data.extend_from_slice(b"\"field\":");
            crate::write::string(&mut data, field);
            sep = ",";
        }
        data.extend_from_slice(sep.as_bytes());
        data.extend_from_slice(b"\"reason\":");
        crate::write::string(&mut data, self.reason());
        if let Some(expected) = self.expected_len() {
            data.extend_from_slice(b",\"expectedBytes\":");
            crate::write::u64(&mut data, expected as u64);
        }
        if let Some(received) = self.received {
            data.extend_from_slice(b",\"received\":");
            let raw = received.as_json();
            const KEEP: usize = 64;
            let whole = raw.len() <= KEEP + 2;
            if whole && strictly_readable(raw.as_bytes()) {
                data.extend_from_slice(raw.as_bytes());
            } else {
                // A JSON string of the value's first characters (of its
                // content, for a string), cut on a character boundary. A
                // short value strict parsers such as serde_json refuse
                // (which the request's JSON may hold, and which would fail
                // the whole reply) is shown the same way, uncut.
                let text = if received.kind() == Kind::String {
                    &raw[1..raw.len() - 1]
                } else {
                    raw
                };
                let cut = if whole {
                    text.len()
                } else {
                    crate::write::char_floor(text, KEEP)
                };
                let mut shown = String::with_capacity(cut + 3);
                shown.push_str(&text[..cut]);
                if !whole {
                    shown.push('…');
                }
                // `shown` is JSON text (a string's escapes may be cut in
                // half): it is written as a plain string of that text.
                crate::write::string(&mut data, &shown);
                if !whole {
                    data.extend_from_slice(b",\"receivedLength\":");
                    crate::write::u64(&mut data, raw.len() as u64);
                }
            }
        }
        data.push(b'}');
        let data = String::from_utf8(data).expect("written from UTF-8 pieces");
        RpcError::invalid_params("Invalid params").with_raw_data(data)
    }
}

/// Whether strict parsers (serde_json, Go's `encoding/json`) read `json`,
/// valid JSON text, back: no escape of half a surrogate pair, no number
/// past f64's range (`1e400`).
#[cold]
fn strictly_readable(json: &[u8]) -> bool {
    !lone_surrogate(json) && numbers_are_finite(json)
}

/// Whether every number in JSON text is within f64's range.
fn numbers_are_finite(json: &[u8]) -> bool {
    let mut i = 0;
    let mut in_string = false;
    while let Some(&b) = json.get(i) {
        i += 1;
        match b {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'-' | b'0'..=b'9' if !in_string => {
                let start = i - 1;
                while json
                    .get(i)
                    .is_some_and(|b| matches!(b, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'))
                {
                    i += 1;
                }
                let number = core::str::from_utf8(&json[start..i]).unwrap_or("");
                if !number.parse::<f64>().is_ok_and(f64::is_finite) {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}

/// Whether JSON text holds a `\u` escape of half a surrogate pair without
/// its other half.
fn lone_surrogate(json: &[u8]) -> bool {
    let unit = |at: usize| -> Option<u16> {
        let hex = json.get(at..at + 4)?;
        u16::from_str_radix(core::str::from_utf8(hex).ok()?, 16).ok()
    };
    let mut i = 0;
    while let Some(at) = json.get(i..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        let at = i + at;
        i = at + 2;
        if json.get(at + 1) != Some(&b'u') {
            continue;
        }
        i = at + 6;
        match unit(at + 2) {
            Some(0xd800..=0xdbff) => {
                if json.get(i..i + 2) == Some(b"\\u")
                    && matches!(unit(i + 2), Some(0xdc00..=0xdfff))
                {
                    i += 6;
                } else {
                    return true;
                }
            }
            Some(0xdc00..=0xdfff) => return true,
            _ => {}
        }
    }
    false
}

impl fmt::Debug for Invalid<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invalid")
            .field("reason", &self.reason())
            .field("received", &self.received)
            .field("param", &self.param)
            .field("position", &self.position)
            .field("field", &self.field)
            .finish()
    }
}

impl fmt::Display for Invalid<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid ")?;
        match (self.param, self.field) {
            (Some(p), Some(field)) => write!(f, "{p}.{field}")?,
            (Some(p), None) => f.write_str(p)?,
            (None, Some(field)) => f.write_str(field)?,
            (None, None) => f.write_str("value")?,
        }
        if let Some(position) = self.position {
            write!(f, " (param {position})")?;
        }
        write!(f, ": {}", self.reason())?;
        if let Some(n) = self.expected_len() {
            write!(f, ", expected {n} bytes")?;
        }
        Ok(())
    }
}

impl std::error::Error for Invalid<'_> {}

impl From<Invalid<'_>> for RpcError {
    /// -32602 Invalid params, with the parameter, reason and received value
    /// in `data` (see [`Invalid::to_rpc_error`]).
    fn from(e: Invalid<'_>) -> Self {
        e.to_rpc_error()
    }
}

/// Where a value sits among the params: copied into the views of object
/// params so that their members' errors name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Site {
    pub(crate) param: Option<&'static str>,
    pub(crate) position: u32,
}

/// Runs `f` on a string value's content. A string with escapes (which no
/// client writes in hex, but JSON allows: `"\u0030x1"` is `"0x1"`) fails
/// the fast path on its backslash and is decoded first, the one case that
/// allocates.
#[inline(always)]
pub(crate) fn text<'a, T>(
    v: RawJson<'a>,
    f: impl Fn(&[u8]) -> Result<T, Reason>,
) -> Result<T, Invalid<'a>> {
    let raw = v.as_bytes();
    if raw.len() < 2 || raw[0] != b'"' {
        return Err(Invalid::new(Reason::NotString, v));
    }
    match f(&raw[1..raw.len() - 1]) {
        Ok(t) => Ok(t),
        Err(reason) => escaped_text(v, reason, f),
    }
}

#[cold]
#[inline(never)]
fn escaped_text<'a, T>(
    v: RawJson<'a>,
    reason: Reason,
    f: impl Fn(&[u8]) -> Result<T, Reason>,
) -> Result<T, Invalid<'a>> {
    let s = v.as_json_str().expect("checked to be a string");
    if !s.has_escapes() {
        return Err(Invalid::new(reason, v));
    }
    let decoded = s
        .decode()
        .ok_or_else(|| Invalid::new(Reason::BadEscape, v))?;
    f(decoded.as_bytes()).map_err(|r| Invalid::new(r, v))
}

/// Like [`text`], for fixed-size DATA: a wrong size carries the expected
/// byte count.
#[inline(always)]
pub(super) fn fixed<'a, const N: usize>(v: RawJson<'a>) -> Result<[u8; N], Invalid<'a>> {
    text(v, hex::data_array::<N>).map_err(|e| {
        if e.reason == Reason::Length {
            Invalid::length(N, v)
        } else {
            e
        }
    })
}

/// DATA: `0x` (or `0X`) and an even number of hex digits, or the empty
/// string (no bytes, as geth reads it), borrowed from the message and
/// checked, not yet decoded. [`len`](Hex::len) is the byte count.
///
/// ```
/// use rpcwire::eth::EthValue;
///
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x02f8"]}"#, &arena).unwrap();
/// let raw = msg.into_single().unwrap().request().unwrap().params().unwrap().nth(0).unwrap();
/// let hex = raw.data()?;
/// assert_eq!((hex.len(), hex.as_str()), (2, Some("0x02f8")));
/// assert_eq!(hex.decode_in(&arena), &[0x02, 0xf8]);
/// assert_eq!(hex.to_bytes(), rpcwire::eth::Bytes::from_static(&[0x02, 0xf8]));
/// # Ok::<(), rpcwire::RpcError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hex<'a> {
    /// The string's content, quotes off, `0x` on (escapes too, when
    /// `escaped`).
    text: &'a [u8],
    escaped: bool,
    len: usize,
}

impl<'a> Hex<'a> {
    /// Checks `v` as DATA.
    pub(crate) fn parse(v: RawJson<'a>) -> Result<Self, Invalid<'a>> {
        let len = text(v, |s| {
            let digits = hex::data_digits(s)?;
            hex::check_digits(digits)?;
            Ok(digits.len() / 2)
        })?;
        let raw = v.as_bytes();
        let text = &raw[1..raw.len() - 1];
        Ok(Hex {
            text,
            // Unescaped, the text is its prefix and digits, or empty.
            escaped: !text.is_empty() && text.len() != 2 + 2 * len,
            len,
        })
    }

    /// The number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes (`"0x"`, or `""`).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The text, its `0x` or `0X` included, as the client wrote it (`None`
    /// if it was written with escapes).
    pub fn as_str(&self) -> Option<&'a str> {
        (!self.escaped).then(|| core::str::from_utf8(self.text).expect("hex digits are ASCII"))
    }

    /// The hex digits, without the prefix (`None` if written with escapes).
    pub fn digits(&self) -> Option<&'a [u8]> {
        (!self.escaped).then(|| digits_of(self.text))
    }

    /// Decodes into `out`, which must be exactly [`len`](Hex::len) bytes.
    ///
    /// # Panics
    ///
    /// If `out.len()` is not [`len`](Hex::len).
    pub fn decode_to_slice(&self, out: &mut [u8]) {
        assert_eq!(out.len(), self.len, "Hex::decode_to_slice: wrong size");
        let ok = if self.escaped {
            self.unescaped(|s| hex::decode_digits(digits_of(s), out))
        } else {
            hex::decode_digits(digits_of(self.text), out)
        };
        ok.expect("checked when the Hex was made");
    }

    #[cold]
    fn unescaped<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        let s = crate::json::JsonStr::from_content(self.text, true);
        f(s.decode()
            .expect("checked when the Hex was made")
            .as_bytes())
    }

    /// Decodes into `arena` (no heap allocation once the arena has room).
    pub fn decode_in<'b>(&self, arena: &'b Bump) -> &'b [u8] {
        let out = arena.alloc_slice_fill_copy(self.len, 0u8);
        self.decode_to_slice(out);
        out
    }

    /// Decodes into a new `Vec`.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        self.decode_to_slice(&mut out);
        out
    }

    /// Decodes into alloy's [`Bytes`].
    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(self.to_vec())
    }

    /// Decodes into an array, if the value is exactly `N` bytes.
    pub fn to_array<const N: usize>(&self) -> Option<[u8; N]> {
        (self.len == N).then(|| {
            let mut out = [0u8; N];
            self.decode_to_slice(&mut out);
            out
        })
    }
}

impl fmt::Debug for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hex({})", String::from_utf8_lossy(self.text))
    }
}

/// The digits of checked DATA text: after its `0x` or `0X`, or none for
/// the empty string.
#[inline]
fn digits_of(text: &[u8]) -> &[u8] {
    text.get(2..).unwrap_or_default()
}

/// Decodes DATA into `arena` in one pass: the digits are checked as they
/// are decoded.
#[inline]
fn bytes_in<'a, 'b>(v: RawJson<'a>, arena: &'b Bump) -> Result<&'b [u8], Invalid<'a>> {
    let raw = v.as_bytes();
    if raw.len() >= 2
        && raw[0] == b'"'
        && let Ok(digits) = hex::data_digits(&raw[1..raw.len() - 1])
        && let Ok(out) = hex::decode_digits_in(digits, arena)
    {
        return Ok(out);
    }
    // Refused, or written with escapes: the checking path says which.
    Ok(Hex::parse(v)?.decode_in(arena))
}

/// A string's text, borrowed from the message, or decoded into `arena`
/// when it has escapes (`"new\u0048eads"`).
fn str_in<'a: 'b, 'b>(v: RawJson<'a>, arena: &'b Bump) -> Result<&'b str, Invalid<'a>> {
    let s = v
        .as_json_str()
        .ok_or_else(|| Invalid::new(Reason::NotString, v))?;
    // `None` only for an unpaired surrogate (`"\ud800"`), which no `&str`
    // can hold.
    s.decode_in(arena)
        .ok_or_else(|| Invalid::new(Reason::BadEscape, v))
}

#[inline]
fn boolean(v: RawJson<'_>) -> Result<bool, Invalid<'_>> {
    v.as_bool().ok_or_else(|| Invalid::new(Reason::NotBool, v))
}

#[inline]
fn u256(v: RawJson<'_>) -> Result<U256, Invalid<'_>> {
    text(v, hex::quantity_limbs::<4>).map(U256::from_limbs)
}

/// Declares each decoder once, for [`EthValue`] (on a bare [`RawJson`])
/// and for [`Param`] (the same, the error naming the parameter).
macro_rules! decoders {
    ($(
        $(#[$doc:meta])*
        fn $name:ident $(<$(const $c:ident: usize),*>)? ($($arg:ident: $argty:ty),*) -> $ret:ty = $body:expr;
    )*) => {
        /// Ethereum decoders over any raw JSON value (a param, a member of
        /// an object, an array element). Each checks the value against the
        /// execution API's grammar and returns [`Invalid`] with the reason.
        ///
        /// ```
        /// use rpcwire::eth::{BlockId, BlockTag, EthValue};
        ///
        /// let arena = rpcwire::bumpalo::Bump::new();
        /// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":["0x1b4","latest","0x01"]}"#, &arena).unwrap();
        /// let p = msg.into_single().unwrap().request().unwrap().params().unwrap();
        /// assert_eq!(p.nth(0).unwrap().quantity_u64()?, 0x1b4);
        /// assert_eq!(p.nth(1).unwrap().block_id()?, BlockId::Tag(BlockTag::Latest));
        /// assert_eq!(p.nth(2).unwrap().quantity_u64().unwrap_err().reason(), "leading zeros");
        /// # Ok::<(), rpcwire::RpcError>(())
        /// ```
        pub trait EthValue<'a>: sealed::Sealed {
            /// DATA decoded into `arena`, checked and decoded in one pass.
            fn bytes_in<'b>(self, arena: &'b Bump) -> Result<&'b [u8], Invalid<'a>>;
            /// A string's text (`eth_subscribe`'s kind, a tracer's name):
            /// borrowed from the message, or decoded into `arena` when it
            /// has escapes. "not a string" for any other value; "invalid
            /// escape" for an unpaired surrogate (`"\ud800"`).
            ///
            /// ```
            /// use rpcwire::eth::EthValue;
            ///
            /// let arena = rpcwire::bumpalo::Bump::new();
            /// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["new\u0048eads",7]}"#, &arena).unwrap();
            /// let p = msg.into_single().unwrap().request().unwrap().params().unwrap();
            /// assert_eq!(p.nth(0).unwrap().str_in(&arena)?, "newHeads");
            /// assert_eq!(p.nth(1).unwrap().str_in(&arena).unwrap_err().reason(), "not a string");
            /// # Ok::<(), rpcwire::RpcError>(())
            /// ```
            fn str_in<'b>(self, arena: &'b Bump) -> Result<&'b str, Invalid<'a>>
            where
                'a: 'b;
            $(
                $(#[$doc])*
                fn $name $(<$(const $c: usize),*>)? (self, $($arg: $argty),*) -> Result<$ret, Invalid<'a>>;
            )*
        }

        impl<'a> EthValue<'a> for RawJson<'a> {
            #[inline]
            fn bytes_in<'b>(self, arena: &'b Bump) -> Result<&'b [u8], Invalid<'a>> {
                bytes_in(self, arena)
            }
            #[inline]
            fn str_in<'b>(self, arena: &'b Bump) -> Result<&'b str, Invalid<'a>>
            where
                'a: 'b,
            {
                str_in(self, arena)
            }
            $(
                #[inline]
                fn $name $(<$(const $c: usize),*>)? (self, $($arg: $argty),*) -> Result<$ret, Invalid<'a>> {
                    let f = $body;
                    f(self, Site::default() $(, $arg)*)
                }
            )*
        }

        impl<'a> Param<'a> {
            /// DATA decoded into `arena`, checked and decoded in one pass.
            ///
            /// The error names this parameter and its position.
            #[inline]
            pub fn bytes_in<'b>(self, arena: &'b Bump) -> Result<&'b [u8], Invalid<'a>> {
                bytes_in(self.value, arena).map_err(|e| e.at(self.name, self.position as usize))
            }
            /// A string's text, borrowed or decoded into `arena` (see
            /// [`EthValue::str_in`]).
            ///
            /// The error names this parameter and its position.
            #[inline]
            pub fn str_in<'b>(self, arena: &'b Bump) -> Result<&'b str, Invalid<'a>>
            where
                'a: 'b,
            {
                str_in(self.value, arena).map_err(|e| e.at(self.name, self.position as usize))
            }
            $(
                $(#[$doc])*
                ///
                /// The error names this parameter and its position.
                #[inline]
                pub fn $name $(<$(const $c: usize),*>)? (self, $($arg: $argty),*) -> Result<$ret, Invalid<'a>> {
                    let f = $body;
                    f(self.value, self.site() $(, $arg)*)
                        .map_err(|e: Invalid<'a>| e.at(self.name, self.position as usize))
                }
            )*
        }
    };
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::json::RawJson<'_> {}
}

// Each body is a closure over the value and the site (where object views
// place their members' errors; the bare form passes no site).
decoders! {
    /// A QUANTITY that fits in a `u64` (block numbers, gas, nonces).
    fn quantity_u64() -> u64 = |v, _: Site| text(v, hex::quantity_u64);
    /// A QUANTITY that fits in a `u128` (gas prices and fees, in wei).
    fn quantity_u128() -> u128 = |v, _: Site| text(v, hex::quantity_u128);
    /// A QUANTITY of at most 256 bits (values and balances, in wei).
    fn quantity_u256() -> U256 = |v, _: Site| u256(v);
    /// A storage key (`eth_getStorageAt`'s slot) as a number: `0x` and up
    /// to 64 hex digits, leading zeros allowed, so that both forms clients
    /// send are read (the QUANTITY `0x1` and the 32-byte DATA `0x00…01`),
    /// as geth and reth read them (`0x` alone and `""` are slot 0).
    fn storage_key() -> U256 = |v, _: Site| text(v, hex::storage_key_limbs).map(U256::from_limbs);
    /// DATA, checked and borrowed (decode it with [`Hex`]'s methods).
    fn data() -> Hex<'a> = |v, _: Site| Hex::parse(v);
    /// DATA of exactly `N` bytes.
    fn data_array<const N: usize>() -> [u8; N] = |v, _: Site| fixed::<N>(v);
    /// An address: DATA of 20 bytes.
    fn address() -> Address = |v, _: Site| fixed::<20>(v).map(Address::from);
    /// A hash (block, transaction, storage slot, topic): DATA of 32 bytes.
    fn hash() -> B256 = |v, _: Site| fixed::<32>(v).map(B256::from);
    /// A boolean (`true` or `false`).
    fn boolean() -> bool = |v, _: Site| boolean(v);
    /// A block id: a tag, a number, a hash, or an EIP-1898 object
    /// (`{"blockHash":…,"requireCanonical":…}` or `{"blockNumber":…}`).
    fn block_id() -> BlockId = |v, _: Site| BlockId::parse(v);
    /// A block number or tag (no hash).
    fn block_number() -> BlockNumberOrTag = |v, _: Site| BlockNumberOrTag::parse(v);
    /// A call object (`eth_call`, `eth_estimateGas`, …), its members found
    /// in one pass and decoded on request.
    fn call_request() -> CallRequest<'a> = |v, site: Site| CallRequest::parse(v, site);
    /// An `eth_getLogs` / `eth_newFilter` filter object.
    fn log_filter() -> LogFilter<'a> = |v, site: Site| LogFilter::parse(v, site);
}

/// One positional parameter: its value, with the name and position that
/// errors report.
///
/// Made by [`EthParams`]; its decoders are [`EthValue`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param<'a> {
    value: RawJson<'a>,
    name: &'static str,
    position: u32,
}

impl<'a> Param<'a> {
    /// A parameter with the name and position its errors report.
    pub fn new(value: RawJson<'a>, name: &'static str, position: usize) -> Self {
        Param {
            value,
            name,
            position: position as u32,
        }
    }

    /// The raw value.
    pub fn value(&self) -> RawJson<'a> {
        self.value
    }

    /// The parameter's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its position among the params (from 0).
    pub fn position(&self) -> usize {
        self.position as usize
    }

    fn site(&self) -> Site {
        Site {
            param: Some(self.name),
            position: self.position,
        }
    }
}

/// A method's positional params, read in order, each with the name its
/// errors report; geth's rules: a missing required parameter, named params
/// and extra params are -32602, and a trailing optional parameter may be
/// absent or `null`.
///
/// The `next_*` readers ([`next_address`](EthParams::next_address),
/// [`next_block_id`](EthParams::next_block_id),
/// [`next_call_request`](EthParams::next_call_request)…) decode the next
/// parameter where it stands, finding its end as they decode (one pass
/// instead of a skip and a decode): the fastest way to read params.
/// After an error, where the reader stands is unspecified.
///
/// ```
/// use rpcwire::eth::{BlockId, BlockTag, EthParams};
///
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97"]}"#, &arena).unwrap();
/// let mut p = EthParams::new(msg.into_single().unwrap().request().unwrap().params());
/// let address = p.required("address")?.address()?;
/// let block = p.optional("blockNumber").map(|b| b.block_id()).transpose()?;
/// p.finish()?;
/// assert_eq!(address[0], 0x48);
/// assert_eq!(block.unwrap_or(BlockId::Tag(BlockTag::Latest)), BlockId::Tag(BlockTag::Latest));
/// # Ok::<(), rpcwire::RpcError>(())
/// ```
#[derive(Clone, Debug)]
pub struct EthParams<'a> {
    values: Option<Elements<'a>>,
    position: u32,
    named: bool,
}

impl<'a> EthParams<'a> {
    /// The params of a call (`None` when absent or `null`, as
    /// [`Call::params`](crate::Call::params) holds them).
    pub fn new(params: Option<Params<'a>>) -> Self {
        EthParams {
            values: params
                .filter(|p| p.is_array())
                .map(|p| Elements::new(p.as_value())),
            position: 0,
            named: params.is_some_and(|p| p.is_object()),
        }
    }

    /// The next parameter, which must be present and not `null`.
    #[inline]
    pub fn required(&mut self, name: &'static str) -> Result<Param<'a>, Invalid<'a>> {
        let position = self.position as usize;
        match self.next(name) {
            Some(p) => Ok(p),
            None => Err(Invalid::absent(if self.named {
                Reason::NotPositional
            } else {
                Reason::Missing
            })
            .at(name, position)),
        }
    }

    /// The next parameter, `None` if absent or `null`.
    #[inline]
    pub fn optional(&mut self, name: &'static str) -> Option<Param<'a>> {
        self.next(name)
    }

    #[inline]
    fn next(&mut self, name: &'static str) -> Option<Param<'a>> {
        let position = self.position;
        self.position += 1;
        let value = self.values.as_mut()?.next()?;
        (!value.is_null()).then_some(Param {
            value,
            name,
            position,
        })
    }

    /// Where the next value starts (after whitespace), if there is one.
    #[inline(always)]
    fn peek(&mut self) -> Option<(&'a [u8], usize)> {
        self.values.as_mut()?.peek()
    }

    /// Steps over a value that a fused reader found to end at `end`.
    #[inline(always)]
    fn advance(&mut self, end: usize) {
        if let Some(v) = self.values.as_mut() {
            v.resume(end);
        }
        self.position += 1;
    }

    /// The next parameter as an address: `required(name)?.address()`, in
    /// one pass (the decoding finds where the value ends).
    #[inline]
    pub fn next_address(&mut self, name: &'static str) -> Result<Address, Invalid<'a>> {
        if let Some((buf, start)) = self.peek()
            && let Some((a, end)) = hex::fixed_at::<20>(buf, start)
        {
            self.advance(end);
            return Ok(Address::from(a));
        }
        self.required(name)?.address()
    }

    /// The next parameter as a hash: `required(name)?.hash()`, in one pass.
    #[inline]
    pub fn next_hash(&mut self, name: &'static str) -> Result<B256, Invalid<'a>> {
        if let Some((buf, start)) = self.peek()
            && let Some((h, end)) = hex::fixed_at::<32>(buf, start)
        {
            self.advance(end);
            return Ok(B256::from(h));
        }
        self.required(name)?.hash()
    }

    /// The next parameter as DATA decoded into `arena`:
    /// `required(name)?.bytes_in(arena)`. The last parameter (a signed
    /// transaction, say) is decoded in one pass, its end known from the
    /// end of the params; an earlier one's end is found with one `memchr`
    /// for its closing quote (the decoding checks every digit).
    #[inline]
    pub fn next_bytes_in<'b>(
        &mut self,
        name: &'static str,
        arena: &'b Bump,
    ) -> Result<&'b [u8], Invalid<'a>> {
        let Some((buf, start)) = self.peek() else {
            return self.required(name)?.bytes_in(arena);
        };
        if buf.get(start..start + 3) != Some(b"\"0x") {
            return self.required(name)?.bytes_in(arena);
        }
        // The last element (`eth_sendRawTransaction`'s only one) ends at
        // the array's last quote: when everything from `0x` to there is
        // hex digits, no quote lies between, so that quote closes this
        // string and one pass both finds the end and decodes. Only with a
        // decoder that stops soon after a bad digit: an earlier element
        // is refused at its closing quote, not after the rest of the
        // params (work that, for each of many DATA params read in turn,
        // grew with the square of their count).
        if let Some(close) = walk::last_string_end(buf)
            && let Some(digits) = buf.get(start + 3..close)
            && digits.len() % 2 == 0
            && hex::stops_at_a_bad_digit(digits.len())
        {
            // Refused when this is not the last element (and its bytes
            // given back to the arena).
            if let Ok(out) = hex::decode_digits_in(digits, arena) {
                self.advance(close + 1);
                return Ok(out);
            }
        }
        if let Some(len) = memchr::memchr(b'"', &buf[start + 3..])
            && len % 2 == 0
            && let Ok(out) = hex::decode_digits_in(&buf[start + 3..start + 3 + len], arena)
        {
            self.advance(start + len + 4);
            return Ok(out);
        }
        self.required(name)?.bytes_in(arena)
    }

    /// The next parameter as an optional block id (`None` when absent or
    /// `null`, which the execution API reads as `latest`):
    /// `optional(name).map(|p| p.block_id()).transpose()`, with tags and
    /// numbers read in one pass.
    #[inline(always)]
    pub fn next_block_id(&mut self, name: &'static str) -> Result<Option<BlockId>, Invalid<'a>> {
        if let Some((buf, start)) = self.peek()
            && let Some((b, end)) = super::block::block_at(buf, start)
        {
            self.advance(end);
            return Ok(Some(BlockId::from(b)));
        }
        self.next_block_id_slow(name)
    }

    /// [`next_block_id`](Self::next_block_id) past a tag or number: an
    /// object, `null`, an absent parameter or an error.
    #[inline(never)]
    fn next_block_id_slow(&mut self, name: &'static str) -> Result<Option<BlockId>, Invalid<'a>> {
        let position = self.position;
        if let Some((buf, start)) = self.peek()
            && buf[start] == b'{'
        {
            return match BlockId::parse_object_at(buf, start) {
                Ok((id, end)) => {
                    self.advance(end);
                    Ok(Some(id))
                }
                Err(e) => Err(self.refused(e, buf, start, name, position)),
            };
        }
        self.optional(name).map(|p| p.block_id()).transpose()
    }

    /// The next parameter as a call object: `required(name)?.call_request()`,
    /// the object walked once (its end is found by the same walk).
    #[inline]
    pub fn next_call_request(
        &mut self,
        name: &'static str,
    ) -> Result<CallRequest<'a>, Invalid<'a>> {
        let position = self.position;
        if let Some((buf, start)) = self.peek()
            && buf[start] == b'{'
        {
            let site = Site {
                param: Some(name),
                position,
            };
            let mut end = 0;
            let mut call = CallRequest::parse_at(buf, start, site, &mut end);
            match &mut call {
                Ok(_) => self.advance(end),
                Err(e) => *e = self.refused(*e, buf, start, name, position),
            }
            return call;
        }
        self.required(name)?.call_request()
    }

    /// The next parameter as a log filter: `required(name)?.log_filter()`,
    /// the object walked once.
    #[inline]
    pub fn next_log_filter(&mut self, name: &'static str) -> Result<LogFilter<'a>, Invalid<'a>> {
        let position = self.position;
        if let Some((buf, start)) = self.peek()
            && buf[start] == b'{'
        {
            let site = Site {
                param: Some(name),
                position,
            };
            let mut end = 0;
            let mut filter = LogFilter::parse_at(buf, start, site, &mut end);
            match &mut filter {
                Ok(_) => self.advance(end),
                Err(e) => *e = self.refused(*e, buf, start, name, position),
            }
            return filter;
        }
        self.required(name)?.log_filter()
    }

    /// A fused reader refused the value at `buf[start]`: it is consumed,
    /// as `required` and `optional` consume a value they refuse, and the
    /// error names the parameter.
    #[cold]
    fn refused(
        &mut self,
        e: Invalid<'a>,
        buf: &'a [u8],
        start: usize,
        name: &'static str,
        position: u32,
    ) -> Invalid<'a> {
        self.advance(walk::skip_value(buf, start));
        e.at(name, position as usize)
    }

    /// Checks that no params are left (geth refuses extra params).
    #[inline]
    pub fn finish(mut self) -> Result<(), Invalid<'a>> {
        // Positional params read to their end, or none given: the common
        // case, without the refusal's code in line.
        let done = match self.values.as_mut() {
            Some(values) => values.peek().is_none(),
            None => !self.named,
        };
        if done { Ok(()) } else { self.refuse_rest() }
    }

    #[cold]
    #[inline(never)]
    fn refuse_rest(mut self) -> Result<(), Invalid<'a>> {
        match self.values.as_mut().and_then(Iterator::next) {
            None if !self.named => Ok(()),
            None => Err(Invalid::absent(Reason::NotPositional)),
            // At its position; no name: no parameter has it.
            Some(extra) => {
                let mut e = Invalid::new(Reason::TooMany, extra);
                e.position = Some(self.position);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{lone_surrogate, numbers_are_finite};

    #[test]
    fn numbers_past_f64_are_found() {
        for (json, finite) in [
            ("1e400", false),
            ("-1E309", false),
            ("1.5e300", true),
            ("123456789012345678901234567890", true),
            (r#"[1,{"a":"1e400"},2e308]"#, false),
            (r#"["1e400","\"1e999"]"#, true),
            (r#"{"a\"":1e-400}"#, true),
        ] {
            assert_eq!(numbers_are_finite(json.as_bytes()), finite, "{json}");
        }
    }

    #[test]
    fn lone_surrogates_are_found() {
        for (json, lone) in [
            (r#""0x12""#, false),
            (r#""\u0030x1""#, false),
            (r#""\ud83d\ude00""#, false),
            (r#""\uD83D\uDE00""#, false),
            (r#""\\ud800""#, false),
            (r#""\n\ud800""#, true),
            (r#""\udfff0""#, true),
            (r#""\ud800\u0030""#, true),
            (r#""\ud800\ud800\udc00""#, true),
            (r#"{"a":"\ud83d"}"#, true),
            (r#""\ud83d""#, true),
        ] {
            assert_eq!(lone_surrogate(json.as_bytes()), lone, "{json}");
        }
    }
}
