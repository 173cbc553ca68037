//! Block identifiers: [`BlockTag`], [`BlockNumberOrTag`], [`BlockId`].

use core::fmt;

use alloy_primitives::B256;

use super::decode::{Invalid, Reason, fixed, text};
use super::hex;
use crate::json::{JsonStr, Kind, RawJson};

/// A block tag.
///
/// Tags are matched exactly, lowercase, as geth and the execution API
/// specification have them (alloy also accepts other cases).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockTag {
    /// `"earliest"`: the first block the node has (the genesis block, or
    /// since history expiry the first block it keeps: geth answers its
    /// history pruning cutoff, which moves as it prunes).
    Earliest,
    /// `"finalized"`: the most recent finalized block.
    Finalized,
    /// `"safe"`: the most recent safe head.
    Safe,
    /// `"latest"`: the head of the canonical chain.
    Latest,
    /// `"pending"`: the block being built.
    Pending,
}

impl BlockTag {
    /// Every tag.
    pub const ALL: [BlockTag; 5] = [
        BlockTag::Earliest,
        BlockTag::Finalized,
        BlockTag::Safe,
        BlockTag::Latest,
        BlockTag::Pending,
    ];

    /// The tag's text, as written on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            BlockTag::Earliest => "earliest",
            BlockTag::Finalized => "finalized",
            BlockTag::Safe => "safe",
            BlockTag::Latest => "latest",
            BlockTag::Pending => "pending",
        }
    }

    /// The tag written `s`, if any.
    #[inline]
    pub fn from_bytes(s: &[u8]) -> Option<BlockTag> {
        Some(match s {
            b"latest" => BlockTag::Latest,
            b"pending" => BlockTag::Pending,
            b"safe" => BlockTag::Safe,
            b"finalized" => BlockTag::Finalized,
            b"earliest" => BlockTag::Earliest,
            _ => return None,
        })
    }
}

impl fmt::Display for BlockTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A block number or a tag: the block parameter of
/// `eth_getBlockByNumber`, `eth_feeHistory` and the filter's
/// `fromBlock` / `toBlock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockNumberOrTag {
    /// A block number.
    Number(u64),
    /// A tag.
    Tag(BlockTag),
}

impl BlockNumberOrTag {
    pub(crate) fn parse(v: RawJson<'_>) -> Result<Self, Invalid<'_>> {
        text(v, number_or_tag(Reason::NotBlockNumber))
    }

    /// The number, if it is one.
    pub fn number(self) -> Option<u64> {
        match self {
            BlockNumberOrTag::Number(n) => Some(n),
            // `earliest` included: not block 0 on a node that expired
            // history.
            BlockNumberOrTag::Tag(_) => None,
        }
    }
}

impl fmt::Display for BlockNumberOrTag {
    /// As written on the wire (without quotes): `0x1b4`, `latest`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockNumberOrTag::Number(n) => write!(f, "{n:#x}"),
            BlockNumberOrTag::Tag(t) => f.write_str(t.as_str()),
        }
    }
}

/// A tag, else a QUANTITY; text that is neither (no `0x`) is refused with
/// `not_hex`, which says what was expected.
#[inline(always)]
fn number_or_tag(not_hex: Reason) -> impl Fn(&[u8]) -> Result<BlockNumberOrTag, Reason> {
    move |s| {
        if let Some(tag) = BlockTag::from_bytes(s) {
            return Ok(BlockNumberOrTag::Tag(tag));
        }
        // A QUANTITY's `""` is zero; a block number's is nothing (geth's
        // `DecodeUint64`).
        if s.is_empty() {
            return Err(not_hex);
        }
        match hex::quantity_u64(s) {
            Ok(n) => Ok(BlockNumberOrTag::Number(n)),
            Err(Reason::MissingPrefix) => Err(not_hex),
            Err(r) => Err(r),
        }
    }
}

/// A tag or a QUANTITY string starting at `buf[start]` (its quote), read
/// with its end: `None` for anything else (the caller takes the general
/// path, which also explains refusals).
#[inline(always)]
pub(crate) fn block_at(buf: &[u8], start: usize) -> Option<(BlockNumberOrTag, usize)> {
    let rest = buf.get(start..)?;
    // The first eight bytes as one word, compared with each tag's first
    // eight (a byte-by-byte match tree cost a dozen branches more).
    let head = match rest.first_chunk::<8>() {
        Some(head) => u64::from_le_bytes(*head),
        // Near the end of the params (`"safe"]`, `"0x1"]`): zeros after.
        None => {
            let mut padded = [0u8; 8];
            padded[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(padded)
        }
    };
    const fn word(s: &[u8; 8]) -> u64 {
        u64::from_le_bytes(*s)
    }
    let (tag, len) = if head == word(b"\"latest\"") {
        (BlockTag::Latest, 8)
    } else if head & 0xff_ffff == word(b"\"0x\0\0\0\0\0") {
        // Up to 16 digits, then the closing quote (validated text: the
        // first quote or backslash after `"0x` ends a plain string).
        let close = crate::scan::arch::find_quote_or_backslash(rest, 3);
        if close > 19 || rest.get(close) != Some(&b'"') {
            return None;
        }
        let n = hex::quantity_u64(&rest[1..close]).ok()?;
        return Some((BlockNumberOrTag::Number(n), start + close + 1));
    } else if head & 0xffff_ffff_ffff == word(b"\"safe\"\0\0") {
        (BlockTag::Safe, 6)
    } else if head == word(b"\"pending") && rest.get(8) == Some(&b'"') {
        (BlockTag::Pending, 9)
    } else if head == word(b"\"finaliz") && rest.get(8..11) == Some(b"ed\"") {
        (BlockTag::Finalized, 11)
    } else if head == word(b"\"earlies") && rest.get(8..10) == Some(b"t\"") {
        (BlockTag::Earliest, 10)
    } else {
        return None;
    };
    Some((BlockNumberOrTag::Tag(tag), start + len))
}

/// A block id (EIP-1898): a tag, a number, a hash, or an object
/// `{"blockHash":…,"requireCanonical":…}` / `{"blockNumber":…}`.
///
/// A string of 66 characters is a hash, as geth and alloy read it; any
/// other string is a tag or a QUANTITY. The object form refuses unknown
/// members, both `blockHash` and `blockNumber`, and `requireCanonical`
/// with `blockNumber`, as alloy does.
///
/// ```
/// use rpcwire::eth::{BlockId, BlockTag, EthValue};
///
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":["safe","0x10",{"blockNumber":"0x10"}]}"#, &arena).unwrap();
/// let p = msg.into_single().unwrap().request().unwrap().params().unwrap();
/// assert_eq!(p.nth(0).unwrap().block_id()?, BlockId::Tag(BlockTag::Safe));
/// assert_eq!(p.nth(1).unwrap().block_id()?, BlockId::Number(16));
/// assert_eq!(p.nth(2).unwrap().block_id()?, BlockId::Number(16));
/// # Ok::<(), rpcwire::RpcError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
// A word-sized tag puts the number and the hash at offset 8: the compiler
// copies the value in aligned words, where with a byte tag the hash sat
// at offset 1 and each copy of a `Result<Option<BlockId>, _>` mixed
// widths so that its loads waited on the stores before them (an
// `eth_getBalance` decode 59 -> 51 ns, `--bench eth_decode`).
#[repr(u64)]
pub enum BlockId {
    /// A block number.
    Number(u64),
    /// A tag.
    Tag(BlockTag),
    /// A block hash.
    Hash {
        /// The hash.
        hash: B256,
        /// EIP-1898's `requireCanonical`, if given.
        require_canonical: Option<bool>,
    },
}

impl From<BlockNumberOrTag> for BlockId {
    fn from(b: BlockNumberOrTag) -> Self {
        match b {
            BlockNumberOrTag::Number(n) => BlockId::Number(n),
            BlockNumberOrTag::Tag(t) => BlockId::Tag(t),
        }
    }
}

impl fmt::Display for BlockId {
    /// A number or tag as [`BlockNumberOrTag`] shows it, a hash as its 64
    /// hex digits (`0x…`). `requireCanonical` is not shown: serialize the
    /// id for its wire form, which keeps it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockId::Number(n) => write!(f, "{n:#x}"),
            BlockId::Tag(t) => f.write_str(t.as_str()),
            BlockId::Hash { hash, .. } => {
                let mut buf = [0u8; 68];
                let n = hex::encode_quoted(hash.as_slice(), &mut buf);
                f.write_str(core::str::from_utf8(&buf[1..n - 1]).expect("hex is ASCII"))
            }
        }
    }
}

/// The wire form, which [`EthValue::block_number`](super::EthValue::block_number)
/// reads back: `"latest"`, `"0x1b4"`.
impl serde::Serialize for BlockNumberOrTag {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The wire form, which [`EthValue::block_id`](super::EthValue::block_id)
/// reads back: a string for a tag, a number or a bare hash, and EIP-1898's
/// object when `requireCanonical` was given, so a gateway that forwards a
/// decoded id keeps what the client asked for.
///
/// ```
/// use rpcwire::eth::{B256, BlockId, BlockTag};
///
/// let hash = B256::repeat_byte(0x11);
/// let hex = format!("0x{}", "11".repeat(32));
/// assert_eq!(serde_json::to_string(&BlockId::Tag(BlockTag::Safe))?, r#""safe""#);
/// assert_eq!(serde_json::to_string(&BlockId::Number(436))?, r#""0x1b4""#);
/// assert_eq!(
///     serde_json::to_string(&BlockId::Hash { hash, require_canonical: None })?,
///     format!(r#""{hex}""#),
/// );
/// assert_eq!(
///     serde_json::to_string(&BlockId::Hash { hash, require_canonical: Some(true) })?,
///     format!(r#"{{"blockHash":"{hex}","requireCanonical":true}}"#),
/// );
/// # Ok::<(), serde_json::Error>(())
/// ```
impl serde::Serialize for BlockId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            BlockId::Hash {
                require_canonical: Some(canonical),
                ..
            } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("blockHash", &format_args!("{self}"))?;
                map.serialize_entry("requireCanonical", canonical)?;
                map.end()
            }
            _ => s.collect_str(self),
        }
    }
}

impl BlockId {
    pub(crate) fn parse(v: RawJson<'_>) -> Result<Self, Invalid<'_>> {
        match v.kind() {
            Kind::String => text(v, |s| {
                if s.len() == 66 {
                    return hex::data_array::<32>(s).map(|h| BlockId::Hash {
                        hash: B256::from(h),
                        require_canonical: None,
                    });
                }
                number_or_tag(Reason::NotBlockId)(s).map(BlockId::from)
            }),
            Kind::Object => BlockId::parse_object(v),
            _ => Err(Invalid::new(Reason::NotBlockId, v)),
        }
    }

    fn parse_object(v: RawJson<'_>) -> Result<Self, Invalid<'_>> {
        Ok(BlockId::parse_object_at(v.as_bytes(), 0)?.0)
    }

    /// Reads the object whose `{` is at `buf[start]` in one walk, and
    /// returns the index after it too.
    pub(crate) fn parse_object_at(buf: &[u8], start: usize) -> Result<(Self, usize), Invalid<'_>> {
        match object_at(buf, start) {
            Some(read) => Ok(read),
            None => Self::walk_object_at(buf, start),
        }
    }

    /// [`parse_object_at`](Self::parse_object_at) by a walk over the
    /// members, for every form.
    fn walk_object_at(buf: &[u8], start: usize) -> Result<(Self, usize), Invalid<'_>> {
        let mut number = None;
        let mut hash = None;
        let mut canonical = None;
        let mut walk = super::walk::Members::at(buf, start);
        let object = |end: usize| RawJson::from_validated(&buf[start..end]);
        for (key, value) in walk.by_ref() {
            match_key(key, |k| {
                // One name after another (as a log filter's): a `match`
                // jumps on the length, an indirect branch.
                let (slot, name): (&mut Option<RawJson<'_>>, &'static str) = if k == b"blockHash" {
                    (&mut hash, "blockHash")
                } else if k == b"requireCanonical" {
                    (&mut canonical, "requireCanonical")
                } else if k == b"blockNumber" {
                    (&mut number, "blockNumber")
                } else {
                    let name = super::walk::quoted_key(buf, key);
                    return Err(Invalid::new(Reason::UnknownMember, name));
                };
                if slot.replace(value).is_some() {
                    return Err(Invalid::new(Reason::DuplicateMember, value).in_field(name));
                }
                Ok(())
            })?;
        }
        let end = walk.end().unwrap_or(buf.len());
        let v = object(end);
        // A member given as `null` is absent, as in a log filter and a
        // call object, and as geth reads this object (`{"blockHash":…,
        // "blockNumber":null}` was refused as naming both).
        let [number, hash, canonical] =
            [number, hash, canonical].map(|m| m.filter(|m| m.as_bytes() != b"null"));
        let id = match (number, hash, canonical) {
            (Some(_), Some(_), _) => Err(Invalid::new(Reason::HashAndNumber, v)),
            (Some(_), None, Some(_)) => Err(Invalid::new(Reason::CanonicalWithNumber, v)),
            (Some(n), None, None) => BlockNumberOrTag::parse(n)
                .map(BlockId::from)
                .map_err(|e| e.in_field("blockNumber")),
            (None, Some(h), c) => Ok(BlockId::Hash {
                hash: fixed::<32>(h)
                    .map(B256::from)
                    .map_err(|e| e.in_field("blockHash"))?,
                require_canonical: match c {
                    Some(c) => Some(c.as_bool().ok_or_else(|| {
                        Invalid::new(Reason::NotBool, c).in_field("requireCanonical")
                    })?),
                    None => None,
                },
            }),
            (None, None, _) => Err(Invalid::new(Reason::NoBlock, v)),
        }?;
        Ok((id, end))
    }

    /// The block number, if the id is one (not for `earliest`: block 0
    /// only on a node that keeps all history).
    pub fn number(self) -> Option<u64> {
        match self {
            BlockId::Number(n) => Some(n),
            _ => None,
        }
    }

    /// The block hash, if the id is one.
    pub fn hash(self) -> Option<B256> {
        match self {
            BlockId::Hash { hash, .. } => Some(hash),
            _ => None,
        }
    }

    /// Whether the id names one block for good (a number or a hash), as
    /// opposed to a tag, whose block can change (`earliest` too, with
    /// history expiry): the first condition for caching a result by block.
    pub fn is_pinned(self) -> bool {
        !matches!(self, BlockId::Tag(_))
    }
}

/// The EIP-1898 objects as clients write them, read without a walk over
/// their members: `{"blockHash":"0x…"}`, optionally with
/// `"requireCanonical":true` (or `false`) after the hash, and
/// `{"blockNumber":…}` with a tag or a number of up to 16 digits, with at
/// most one space after each separator (web3.py writes one). `None` for
/// any other text, which [`BlockId::parse_object_at`] walks. The buffer
/// holds validated JSON.
#[inline]
fn object_at(buf: &[u8], start: usize) -> Option<(BlockId, usize)> {
    let after = |pos: usize, text: &[u8]| -> Option<usize> {
        let end = pos + text.len();
        (buf.get(pos..end)? == text).then_some(end)
    };
    let space = |pos: usize| pos + usize::from(buf.get(pos) == Some(&b' '));
    if let Some(at) = after(start, b"{\"blockHash\":") {
        let (hash, mut pos) = hex::fixed_at::<32>(buf, space(at))?;
        let mut require_canonical = None;
        if buf.get(pos) == Some(&b',') {
            let at = space(after(space(pos + 1), b"\"requireCanonical\":")?);
            let (value, end) = match after(at, b"true") {
                Some(end) => (true, end),
                None => (false, after(at, b"false")?),
            };
            require_canonical = Some(value);
            pos = end;
        }
        let id = BlockId::Hash {
            hash: B256::from(hash),
            require_canonical,
        };
        return Some((id, after(pos, b"}")?));
    }
    let at = after(start, b"{\"blockNumber\":")?;
    let (number, pos) = block_at(buf, space(at))?;
    Some((BlockId::from(number), after(pos, b"}")?))
}

/// Runs `f` on an object member's name, decoded if it was written with
/// escapes (the rare path, which allocates).
#[inline(always)]
pub(crate) fn match_key<T>(key: JsonStr<'_>, f: impl FnOnce(&[u8]) -> T) -> T {
    if !key.has_escapes() {
        return f(key.as_bytes());
    }
    match key.decode() {
        Some(k) => f(k.as_bytes()),
        // An unpaired surrogate: no known name.
        None => f(b"\xff"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straight reader of block objects agrees with the walk wherever
    /// it answers, and answers for the forms clients write.
    #[test]
    fn object_at_reads_as_the_walk() {
        let hash = "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b";
        let mut objects: Vec<(String, bool)> = Vec::new();
        for colon in [":", ": ", ":  ", " :"] {
            for comma in [",", ", ", " ,"] {
                let straight = !colon.ends_with("  ") && !colon.starts_with(' ');
                let straight_comma = straight && !comma.starts_with(' ');
                objects.push((format!("{{\"blockHash\"{colon}\"{hash}\"}}"), straight));
                for canonical in ["true", "false"] {
                    objects.push((
                        format!(
                            "{{\"blockHash\"{colon}\"{hash}\"{comma}\"requireCanonical\"{colon}{canonical}}}"
                        ),
                        straight_comma,
                    ));
                }
                for value in ["\"0x1b4\"", "\"latest\"", "\"safe\"", "\"earliest\""] {
                    objects.push((format!("{{\"blockNumber\"{colon}{value}}}"), straight));
                }
                // Left to the walk: other orders, `null` members, errors.
                for other in [
                    format!(
                        "{{\"requireCanonical\"{colon}true{comma}\"blockHash\"{colon}\"{hash}\"}}"
                    ),
                    format!("{{\"blockHash\"{colon}\"{hash}\"{comma}\"blockNumber\"{colon}null}}"),
                    format!(
                        "{{\"blockHash\"{colon}\"{hash}\"{comma}\"blockHash\"{colon}\"{hash}\"}}"
                    ),
                    format!(
                        "{{\"blockHash\"{colon}\"{hash}\"{comma}\"requireCanonical\"{colon}null}}"
                    ),
                    format!(
                        "{{\"blockHash\"{colon}\"{hash}\"{comma}\"requireCanonical\"{colon}1}}"
                    ),
                    format!("{{\"blockHash\"{colon}\"{}\"}}", &hash[..64]),
                    format!("{{\"blockHash\"{colon}\"{hash}0\"}}"),
                    format!("{{\"blockHash\"{colon}\"{}\"}}", hash.replace('8', "g")),
                    format!("{{\"blockHash\"{colon}\"{hash}\" }}"),
                    format!("{{\"blockNumber\"{colon}\"0x01\"}}"),
                    format!(
                        "{{\"blockNumber\"{colon}\"0x1\"{comma}\"requireCanonical\"{colon}true}}"
                    ),
                    format!("{{\"blockNumber\"{colon}null}}"),
                    format!(
                        "{{\"blockNumber\"{colon}\"0x1\"{comma}\"blockHash\"{colon}\"{hash}\"}}"
                    ),
                    format!("{{\"blockHashes\"{colon}\"{hash}\"}}"),
                    "{}".to_string(),
                    "{ }".to_string(),
                ] {
                    objects.push((other, false));
                }
            }
        }
        for (object, straight) in &objects {
            for after in ["", "]", ",\"0x1\"]"] {
                for before in [
                    "",
                    "[",
                    "[{\"to\":\"0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97\"},",
                ] {
                    let buf = format!("{before}{object}{after}");
                    let at = before.len();
                    let walked = BlockId::walk_object_at(buf.as_bytes(), at);
                    match object_at(buf.as_bytes(), at) {
                        Some((id, end)) => {
                            let (want, want_end) = walked
                                .unwrap_or_else(|e| panic!("{buf}: read, but the walk says {e}"));
                            assert_eq!((id, end), (want, want_end), "{buf}");
                        }
                        None => assert!(!straight, "{buf}: not read straight"),
                    }
                    // And through the entry point, whichever reads it.
                    assert_eq!(
                        BlockId::parse_object_at(buf.as_bytes(), at).map_err(|e| e.to_string()),
                        walked.map_err(|e| e.to_string()),
                        "{buf}"
                    );
                }
            }
        }
    }

    /// The fast reader agrees with the general one (the string's content
    /// read as a tag or QUANTITY) wherever it answers, and answers for
    /// every tag and every number of up to 16 digits, whatever follows.
    #[test]
    fn block_at_reads_as_the_general_path() {
        let general = number_or_tag(Reason::NotBlockNumber);
        let mut texts: Vec<String> = Vec::new();
        for tag in ["latest", "pending", "safe", "finalized", "earliest"] {
            texts.push(format!("\"{tag}\""));
            // Near misses: cut short, one byte more, another case.
            texts.push(format!("\"{}\"", &tag[..tag.len() - 1]));
            texts.push(format!("\"{tag}x\""));
            texts.push(format!("\"{}\"", tag.to_uppercase()));
        }
        for digits in 1..=18 {
            let hex: String = "1a2B3c4D5e6F7089abcdef".chars().take(digits).collect();
            texts.push(format!("\"0x{hex}\""));
            texts.push(format!("\"0x0{hex}\""));
            texts.push(format!("\"0X{hex}\""));
            texts.push(format!("\"0x{hex}g\""));
            texts.push(format!("\"0x{hex}\\u0030\""));
        }
        texts.extend(["\"0x\"", "\"0x0\"", "\"\"", "null", "{}", "7"].map(String::from));
        for text in &texts {
            let content = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .filter(|t| !t.contains('\\'));
            let want = content.map(|c| general(c.as_bytes()));
            for after in ["", "]", ",\"0x1\"]", " ]"] {
                for before in ["", "[", "[\"0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97\","] {
                    let buf = format!("{before}{text}{after}");
                    let got = block_at(buf.as_bytes(), before.len());
                    match (got, want) {
                        (Some((v, end)), Some(Ok(w))) => {
                            assert_eq!(v, w, "{buf}");
                            assert_eq!(end, before.len() + text.len(), "{buf}");
                        }
                        (Some(v), _) => {
                            panic!("{buf}: read as {v:?}, the general path says {want:?}")
                        }
                        (None, Some(Ok(w))) => {
                            // Declined only for what the fast path leaves
                            // to the general one: more than 16 digits, or
                            // a `0X` prefix.
                            assert!(
                                matches!(w, BlockNumberOrTag::Number(_))
                                    && (text.len() > 21 || text.starts_with("\"0X")),
                                "{buf}: declined {w:?}"
                            );
                        }
                        (None, _) => {}
                    }
                }
            }
        }
    }
}
