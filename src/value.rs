//! Layer 3: borrowed views of validated JSON: [`RawValue`], [`JsonStr`],
//! [`Id`] and [`Params`].
//!
//! Nothing here allocates or re-validates: every view is cut from input the
//! scanner already accepted, and walks it with the scanner's trusted fast path.

use core::fmt;

use crate::scan;

/// The type of a JSON value, read from its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `null`
    Null,
    /// `true` or `false`
    Bool,
    /// A number, in any of JSON's forms.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl Kind {
    fn of(raw: &[u8]) -> Kind {
        match raw.first() {
            Some(b'"') => Kind::String,
            Some(b'[') => Kind::Array,
            Some(b'{') => Kind::Object,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'n') | None => Kind::Null,
            Some(_) => Kind::Number,
        }
    }
}

/// One validated JSON value, borrowed from the message: exactly its bytes,
/// without surrounding whitespace.
///
/// ```
/// let arena = bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[ 1.5e3 , "x" ]}"#, &arena)?;
/// let params = msg.into_single().unwrap().request().unwrap().params().unwrap();
/// let first = params.iter().next().unwrap();
/// assert_eq!(first.as_bytes(), b"1.5e3");
/// assert_eq!(first.kind(), rpcwire::Kind::Number);
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawValue<'a> {
    raw: &'a [u8],
}

impl<'a> RawValue<'a> {
    pub(crate) fn from_validated(raw: &'a [u8]) -> Self {
        RawValue { raw }
    }

    /// The value's JSON text, byte for byte as it appeared in the message.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The value's JSON text as `&str` (it is valid UTF-8).
    #[inline]
    pub fn get(&self) -> &'a str {
        scan::validated_str(self.raw)
    }

    /// The value's type.
    #[inline]
    pub fn kind(&self) -> Kind {
        Kind::of(self.raw)
    }

    /// Whether the value is `null`.
    pub fn is_null(&self) -> bool {
        self.raw == b"null"
    }

    /// The boolean, if the value is `true` or `false`.
    pub fn as_bool(&self) -> Option<bool> {
        match self.raw {
            b"true" => Some(true),
            b"false" => Some(false),
            _ => None,
        }
    }

    /// The number, if the value is a non-negative integer written without
    /// fraction or exponent that fits in a `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        parse_u64(self.raw)
    }

    /// The number, if the value is an integer written without fraction or
    /// exponent that fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        parse_i64(self.raw)
    }

    /// The string, if the value is one.
    pub fn as_json_str(&self) -> Option<JsonStr<'a>> {
        JsonStr::from_quoted(self.raw)
    }

    /// The string's text if the value is a string without escapes; see
    /// [`JsonStr`] for strings with escapes.
    pub fn as_str(&self) -> Option<&'a str> {
        self.as_json_str()?.as_str()
    }
}

impl fmt::Debug for RawValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawValue({})", self.get())
    }
}

impl fmt::Display for RawValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

pub(crate) fn parse_u64(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 20 || (raw[0] == b'0' && raw.len() > 1) {
        return None;
    }
    raw.iter().try_fold(0u64, |acc, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add((d - b'0') as u64)
    })
}

pub(crate) fn parse_i64(raw: &[u8]) -> Option<i64> {
    match raw.strip_prefix(b"-") {
        Some(digits) => {
            let magnitude = parse_u64(digits)?;
            if magnitude <= i64::MAX as u64 + 1 {
                Some((magnitude as i64).wrapping_neg())
            } else {
                None
            }
        }
        None => i64::try_from(parse_u64(raw)?).ok(),
    }
}

/// A validated JSON string, borrowed from the message: its content between
/// the quotes, still escaped.
///
/// Most strings in JSON-RPC traffic have no escapes, and for them
/// [`as_str`](JsonStr::as_str) is free. Strings with escapes are decoded on
/// request, into an arena ([`decode_in`](JsonStr::decode_in)) or compared
/// without decoding ([`eq_str`](JsonStr::eq_str)).
///
/// ```
/// let arena = bumpalo::Bump::new();
/// let v = rpcwire::parse(br#"{"jsonrpc":"2.0","id":"a\u00e9","method":"m"}"#, &arena)?;
/// let id = v.into_single().unwrap().request().unwrap().id().unwrap();
/// let s = id.as_json_str().unwrap();
/// assert_eq!(s.as_str(), None); // it has an escape
/// assert!(s.eq_str("aé"));
/// assert_eq!(s.decode_in(&arena), Some("aé"));
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct JsonStr<'a> {
    content: &'a [u8],
    escaped: bool,
}

impl<'a> JsonStr<'a> {
    /// `quoted` is a validated JSON string including its quotes.
    pub(crate) fn from_quoted(quoted: &'a [u8]) -> Option<Self> {
        if quoted.len() < 2 || quoted[0] != b'"' {
            return None;
        }
        let content = &quoted[1..quoted.len() - 1];
        Some(JsonStr {
            content,
            escaped: memchr::memchr(b'\\', content).is_some(),
        })
    }

    pub(crate) fn from_content(content: &'a [u8], escaped: bool) -> Self {
        JsonStr { content, escaped }
    }

    /// The raw content between the quotes, escapes not decoded.
    pub fn raw(&self) -> &'a [u8] {
        self.content
    }

    /// Whether the string contains backslash escapes.
    pub fn has_escapes(&self) -> bool {
        self.escaped
    }

    /// The text, if the string has no escapes (then it is the raw content).
    pub fn as_str(&self) -> Option<&'a str> {
        if self.escaped {
            None
        } else {
            Some(scan::validated_str(self.content))
        }
    }

    /// Whether the decoded text equals `want`, without allocating.
    pub fn eq_str(&self, want: &str) -> bool {
        scan::unescaped_eq(self.content, self.escaped, want.as_bytes())
    }

    /// The decoded text, borrowed from the message if there is nothing to
    /// decode, else decoded into `arena`. `None` if the string holds an
    /// unpaired surrogate escape (`"\ud800"`), which no `&str` can hold.
    pub fn decode_in<'b>(&self, arena: &'b bumpalo::Bump) -> Option<&'b str>
    where
        'a: 'b,
    {
        if !self.escaped {
            return Some(scan::validated_str(self.content));
        }
        let mut out = bumpalo::collections::Vec::with_capacity_in(self.content.len(), arena);
        scan::unescape(self.content, &mut out).ok()?;
        // Unescaping validated UTF-8 yields UTF-8; checked, not assumed.
        core::str::from_utf8(out.into_bump_slice()).ok()
    }

    /// The decoded text, borrowed if there is nothing to decode. `None` if
    /// the string holds an unpaired surrogate escape.
    pub fn decode(&self) -> Option<std::borrow::Cow<'a, str>> {
        if !self.escaped {
            return Some(std::borrow::Cow::Borrowed(scan::validated_str(
                self.content,
            )));
        }
        let mut out = Vec::with_capacity(self.content.len());
        scan::unescape(self.content, &mut out).ok()?;
        String::from_utf8(out).ok().map(std::borrow::Cow::Owned)
    }
}

impl fmt::Debug for JsonStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", scan::validated_str(self.content))
    }
}

/// A request or response id: a number, a string or `null`, kept as its exact
/// bytes so that the reply echoes it byte for byte (`1e3` stays `1e3`,
/// `18446744073709551616` does not overflow, `"\u0041"` keeps its escape).
///
/// ```
/// let arena = bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":-0,"method":"m"}"#, &arena)?;
/// let id = msg.into_single().unwrap().request().unwrap().id().unwrap();
/// assert_eq!(id.as_bytes(), b"-0");
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Id<'a> {
    raw: &'a [u8],
}

impl<'a> Id<'a> {
    /// `null`, the id of replies to messages whose id could not be read.
    pub const NULL: Id<'static> = Id { raw: b"null" };

    pub(crate) fn from_validated(raw: &'a [u8]) -> Self {
        Id { raw }
    }

    /// The id's JSON text, exactly as received: echo these bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The id's JSON text as `&str`.
    pub fn get(&self) -> &'a str {
        scan::validated_str(self.raw)
    }

    /// [`Kind::Number`], [`Kind::String`] or [`Kind::Null`].
    pub fn kind(&self) -> Kind {
        Kind::of(self.raw)
    }

    /// Whether the id is `null`.
    pub fn is_null(&self) -> bool {
        self.raw == b"null"
    }

    /// The id as a `u64`, if it is a plain non-negative integer that fits.
    pub fn as_u64(&self) -> Option<u64> {
        parse_u64(self.raw)
    }

    /// The id as an `i64`, if it is a plain integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        parse_i64(self.raw)
    }

    /// The id as a string, if it is one.
    pub fn as_json_str(&self) -> Option<JsonStr<'a>> {
        JsonStr::from_quoted(self.raw)
    }
}

impl fmt::Debug for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.get())
    }
}

impl fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

/// A request's `params`: a validated array or object, kept as raw bytes until
/// a handler asks for values.
///
/// Positional access ([`iter`](Params::iter), [`nth`](Params::nth)) and named
/// access ([`get`](Params::get), [`entries`](Params::entries)) walk the bytes
/// lazily and never allocate.
///
/// ```
/// let arena = bumpalo::Bump::new();
/// let msg = rpcwire::parse(
///     br#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0xab","data":"0x"},"latest"]}"#,
///     &arena,
/// )?;
/// let params = msg.into_single().unwrap().request().unwrap().params().unwrap();
/// assert!(params.is_array());
/// let call = params.nth(0).unwrap().as_params().unwrap();
/// assert_eq!(call.get("to").unwrap().as_str(), Some("0xab"));
/// assert_eq!(params.nth(1).unwrap().as_str(), Some("latest"));
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params<'a> {
    raw: &'a [u8],
}

impl<'a> Params<'a> {
    pub(crate) fn from_validated(raw: &'a [u8]) -> Self {
        Params { raw }
    }

    /// The params' JSON text, exactly as received.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The params' JSON text as `&str`.
    pub fn get_raw(&self) -> &'a str {
        scan::validated_str(self.raw)
    }

    /// Whether the params are positional (`[...]`).
    pub fn is_array(&self) -> bool {
        self.raw.first() == Some(&b'[')
    }

    /// Whether the params are named (`{...}`).
    pub fn is_object(&self) -> bool {
        self.raw.first() == Some(&b'{')
    }

    /// The params as one raw value.
    pub fn as_value(&self) -> RawValue<'a> {
        RawValue::from_validated(self.raw)
    }

    /// The positional values, in order; empty if the params are named.
    pub fn iter(&self) -> Positional<'a> {
        Positional {
            raw: if self.is_array() { self.raw } else { b"[]" },
            pos: 1,
        }
    }

    /// The `n`th positional value (from 0).
    pub fn nth(&self, n: usize) -> Option<RawValue<'a>> {
        self.iter().nth(n)
    }

    /// The number of positional values or named members.
    pub fn len(&self) -> usize {
        if self.is_array() {
            self.iter().count()
        } else {
            self.entries().count()
        }
    }

    /// Whether there are no values at all (`[]` or `{}`).
    pub fn is_empty(&self) -> bool {
        scan::skip_ws(self.raw, 1) + 1 >= self.raw.len()
    }

    /// The named members, in order; empty if the params are positional.
    pub fn entries(&self) -> Named<'a> {
        Named {
            raw: if self.is_object() { self.raw } else { b"{}" },
            pos: 1,
        }
    }

    /// The value of the named member `name` (the first, if it repeats),
    /// comparing names after unescaping.
    pub fn get(&self, name: &str) -> Option<RawValue<'a>> {
        self.entries()
            .find(|(key, _)| key.eq_str(name))
            .map(|(_, v)| v)
    }
}

impl<'a> RawValue<'a> {
    /// The value as [`Params`], if it is an array or an object; for nested
    /// structures such as `eth_call`'s call object.
    pub fn as_params(&self) -> Option<Params<'a>> {
        matches!(self.kind(), Kind::Array | Kind::Object).then(|| Params::from_validated(self.raw))
    }
}

impl fmt::Debug for Params<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Params({})", self.get_raw())
    }
}

impl<'a> IntoIterator for Params<'a> {
    type Item = RawValue<'a>;
    type IntoIter = Positional<'a>;
    fn into_iter(self) -> Positional<'a> {
        self.iter()
    }
}

/// Iterator over positional params; see [`Params::iter`].
#[derive(Clone, Debug)]
pub struct Positional<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Positional<'a> {
    type Item = RawValue<'a>;

    fn next(&mut self) -> Option<RawValue<'a>> {
        let start = scan::skip_ws(self.raw, self.pos);
        match self.raw.get(start) {
            None | Some(b']') => {
                self.pos = self.raw.len();
                return None;
            }
            Some(_) => {}
        }
        let end = scan::skip_value_trusted(self.raw, start);
        // Step over the separator: `,` or the closing `]`.
        self.pos = scan::skip_ws(self.raw, end) + 1;
        Some(RawValue::from_validated(&self.raw[start..end]))
    }
}

/// Iterator over named params; see [`Params::entries`].
#[derive(Clone, Debug)]
pub struct Named<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Named<'a> {
    type Item = (JsonStr<'a>, RawValue<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let key_start = scan::skip_ws(self.raw, self.pos);
        if self.raw.get(key_start) != Some(&b'"') {
            self.pos = self.raw.len();
            return None;
        }
        let key_end = scan::skip_string_trusted(self.raw, key_start + 1);
        let key = JsonStr::from_quoted(&self.raw[key_start..key_end])?;
        // Step over the colon.
        let value_start = scan::skip_ws(self.raw, scan::skip_ws(self.raw, key_end) + 1);
        let value_end = scan::skip_value_trusted(self.raw, value_start);
        self.pos = scan::skip_ws(self.raw, value_end) + 1;
        let value = RawValue::from_validated(self.raw.get(value_start..value_end)?);
        Some((key, value))
    }
}
