//! Borrowed views of validated JSON text: [`RawJson`] (any value), [`JsonStr`]
//! (a string, escapes kept until asked for) and [`Kind`].
//!
//! Nothing here allocates or re-validates: every view is cut from input the
//! scanner already accepted, and walks it with the scanner's trusted fast path.
//!
//! Every view names its text the same way: `as_bytes()` is the exact JSON
//! text (for [`JsonStr`], the content between the quotes, escapes and all),
//! `as_json()` the same text as `&str`, and `as_str()` the *decoded* string,
//! when there is nothing to decode.

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
    pub(crate) fn of(raw: &[u8]) -> Kind {
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
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[ 1.5e3 , "x" ]}"#, &arena)?;
/// let params = msg.into_single().unwrap().request().unwrap().params().unwrap();
/// let first = params.iter().next().unwrap();
/// assert_eq!(first.as_bytes(), b"1.5e3");
/// assert_eq!(first.kind(), rpcwire::json::Kind::Number);
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawJson<'a> {
    pub(crate) raw: &'a [u8],
}

impl<'a> RawJson<'a> {
    pub(crate) fn from_validated(raw: &'a [u8]) -> Self {
        RawJson { raw }
    }

    /// The value's JSON text, byte for byte as it appeared in the message.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The value's JSON text as `&str` (it is valid UTF-8).
    #[inline]
    pub fn as_json(&self) -> &'a str {
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

    /// Decodes the value into `T` with serde_json, as
    /// `serde_json::from_slice(self.as_bytes())` does: any kind of value
    /// (a number, string, bool or `null` as well as an array or object),
    /// serde's rules and nothing else (unlike
    /// [`Params::decode`](crate::request::Params::decode), `()` does not
    /// take `[]` and a tuple's missing values are not read as `null`).
    /// `T` may borrow from the message where the text has no escapes; a
    /// `&str` given a string with escapes fails ("expected a borrowed
    /// string"): use [`decode_in`](RawJson::decode_in) for those.
    ///
    /// The error is serde_json's (the type
    /// [`peer::DecodeError::Json`](crate::peer::DecodeError::Json)
    /// carries): the reason, and its [`line`](serde_json::Error::line) and
    /// [`column`](serde_json::Error::column) in the value's own text
    /// ([`as_bytes`](RawJson::as_bytes)), not in the message.
    ///
    /// ```
    /// use rpcwire::response::ResponseMessage;
    /// let arena = rpcwire::bumpalo::Bump::new();
    /// let reply = br#"[{"jsonrpc":"2.0","id":1,"result":"0x1b4"},{"jsonrpc":"2.0","id":2,"result":{"gasUsed":21000,"status":true}}]"#;
    /// let ResponseMessage::Batch(batch) = rpcwire::parse_response(reply, &arena)? else { unreachable!() };
    /// let results: Vec<_> = batch.map(|r| r.unwrap().result().unwrap()).collect();
    /// let number: &str = results[0].decode()?;
    /// assert_eq!(number, "0x1b4");
    /// #[derive(serde::Deserialize)]
    /// #[serde(rename_all = "camelCase")]
    /// struct Receipt { gas_used: u64, status: bool }
    /// let receipt: Receipt = results[1].decode()?;
    /// assert_eq!((receipt.gas_used, receipt.status), (21000, true));
    /// let e = results[0].decode::<u64>().unwrap_err();
    /// assert_eq!(e.to_string(), r#"invalid type: string "0x1b4", expected u64 at line 1 column 7"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decode<T: serde::Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(self.raw)
    }

    /// Decodes the value into `T` as [`decode`](RawJson::decode) does,
    /// lending strings with escapes from `arena` (copied there, decoded),
    /// so that `&'a str` works for every string, at any depth; strings
    /// without escapes still come straight from the message. The same
    /// lending as [`Params::decode_in`](crate::request::Params::decode_in),
    /// without its params rules.
    ///
    /// ```
    /// use rpcwire::response::ResponseMessage;
    /// let arena = rpcwire::bumpalo::Bump::new();
    /// let reply = br#"{"jsonrpc":"2.0","id":1,"result":"Ad\u00e8le"}"#;
    /// let ResponseMessage::Single(r) = rpcwire::parse_response(reply, &arena)? else { unreachable!() };
    /// let name: &str = r.result().unwrap().decode_in(&arena)?;
    /// assert_eq!(name, "Ad\u{e8}le");
    /// assert!(r.result().unwrap().decode::<&str>().is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decode_in<T: serde::Deserialize<'a>>(
        &self,
        arena: &'a bumpalo::Bump,
    ) -> Result<T, serde_json::Error> {
        crate::de::value_from_slice_in(self.raw, arena)
    }
}

impl fmt::Debug for RawJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawJson({})", self.as_json())
    }
}

impl fmt::Display for RawJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
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
/// let arena = rpcwire::bumpalo::Bump::new();
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

    /// The content between the quotes, byte for byte, escapes not decoded.
    pub fn as_bytes(&self) -> &'a [u8] {
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
        self.decode_or_surrogate_at(arena).ok()
    }

    /// [`decode_in`](Self::decode_in), or where in the content the first
    /// unpaired surrogate escape starts.
    pub(crate) fn decode_or_surrogate_at<'b>(
        &self,
        arena: &'b bumpalo::Bump,
    ) -> Result<&'b str, usize>
    where
        'a: 'b,
    {
        if !self.escaped {
            return Ok(scan::validated_str(self.content));
        }
        // Reserve what the decoded text needs, not the escaped length: a
        // string of `\u` escapes decodes to a sixth of its size.
        let mut out =
            bumpalo::collections::Vec::with_capacity_in(scan::unescaped_len(self.content)?, arena);
        scan::unescape(self.content, &mut out)?;
        // Unescaping validated UTF-8 yields UTF-8; checked, not assumed
        // (never fails: an offset of 0 if it did).
        core::str::from_utf8(out.into_bump_slice()).map_err(|_| 0)
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
