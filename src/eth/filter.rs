//! The log filter of `eth_getLogs` and `eth_newFilter`: [`LogFilter`],
//! its [`Addresses`] and [`Topics`].

use alloy_primitives::{Address, B256};

use super::block::{BlockNumberOrTag, match_key};
use super::decode::{EthValue, Invalid, Reason, Site};
use super::hex;
use super::walk::{Elements, Members, skip_value};
use crate::json::{Kind, RawJson};
use crate::scan::skip_ws;

/// A log filter, borrowed from the message: `fromBlock`, `toBlock`,
/// `blockHash`, `address` (one or many) and `topics` (up to four positions,
/// each `null`, a topic, or an array of alternatives), found in one pass
/// and decoded on request.
///
/// Refused when it is made: a member given twice, and `blockHash` together
/// with `fromBlock` or `toBlock` (as geth does). Unknown members are
/// ignored.
///
/// ```
/// use rpcwire::eth::{BlockNumberOrTag, EthParams, TopicFilter};
///
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x1312d00","toBlock":"latest","address":["0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"],"topics":["0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef",null]}]}"#, &arena).unwrap();
/// let mut p = EthParams::new(msg.into_single().unwrap().request().unwrap().params());
/// let filter = p.required("filter")?.log_filter()?;
/// assert_eq!(filter.from_block()?, Some(BlockNumberOrTag::Number(20_000_000)));
/// assert_eq!(filter.addresses()?.count(), 1);
/// let mut topics = filter.topics()?;
/// assert!(matches!(topics.next(), Some(Ok(TopicFilter::One(t))) if t[0] == 0xdd));
/// assert!(matches!(topics.next(), Some(Ok(TopicFilter::Any))));
/// assert!(topics.next().is_none());
/// # Ok::<(), rpcwire::RpcError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogFilter<'a> {
    /// The members' raw values, indexed by [`Member`] (an array, so that
    /// the walk stores a value without branching on which member it is).
    members: [Option<RawJson<'a>>; MEMBERS],
    object: RawJson<'a>,
    site: Site,
    /// `address` when it is one address, decoded by the walk that found
    /// its end.
    one_address: Option<Address>,
    /// Where the walk found the first topic positions to end.
    topic_ends: TopicEnds,
}

/// Where a filter's first four `topics` positions end, as [`LogFilter`]'s
/// walk found them while it looked for the array's end, so that
/// [`Topics`] takes each position without walking it again (an array of
/// alternatives, or text the hash reader refuses and the general reader
/// then reports). The hashes themselves are decoded as they are reached:
/// decoded by the walk, four of them made the filter 128 bytes larger, and
/// it is moved several times on its way to the handler (callgrind,
/// `eth_getLogs`: 2,298 -> 2,275 instructions a decode, `memcpy` 151 -> 29;
/// 4.31x-4.47x -> 4.64x-4.67x against the serde tuple, alternated).
///
/// The index after each position's value in the array's text (0: not
/// recorded).
type TopicEnds = [u32; 4];

/// Reads the topics array whose `[` is at `buf[start]` (validated text),
/// recording in `ends` where its first positions end, and returns the
/// index after it.
#[inline]
fn read_topics(buf: &[u8], start: usize, ends: &mut TopicEnds) -> usize {
    // A second `topics` member (refused as a duplicate) starts afresh.
    *ends = [0; 4];
    let mut pos = skip_ws(buf, start + 1);
    if buf.get(pos) == Some(&b']') {
        return pos + 1;
    }
    let mut position = 0;
    loop {
        let value_end = skip_value(buf, pos);
        if let Some(end) = ends.get_mut(position) {
            // (A 4 GiB array is not recorded: it is walked again.)
            *end = u32::try_from(value_end - start).unwrap_or(0);
        }
        position += 1;
        let separator = skip_ws(buf, value_end);
        if buf.get(separator) != Some(&b',') {
            return (separator + 1).min(buf.len());
        }
        pos = skip_ws(buf, separator + 1);
    }
}

/// The members a filter reads.
#[derive(Clone, Copy)]
enum Member {
    FromBlock,
    ToBlock,
    BlockHash,
    Address,
    Topics,
}

const MEMBERS: usize = 5;

/// The members' wire names, indexed by [`Member`].
const MEMBER_NAMES: [&str; MEMBERS] = ["fromBlock", "toBlock", "blockHash", "address", "topics"];

impl<'a> LogFilter<'a> {
    pub(crate) fn parse(v: RawJson<'a>, site: Site) -> Result<Self, Invalid<'a>> {
        if v.kind() != Kind::Object {
            return Err(Invalid::new(Reason::NotObject, v).at_site(site));
        }
        LogFilter::parse_at(v.as_bytes(), 0, site, &mut 0)
    }

    /// Reads the object whose `{` is at `buf[start]` in one walk, and
    /// sets `end` to the index after it (given apart, as
    /// `CallRequest::parse_at` does, so that the view is not copied on
    /// its way out).
    pub(crate) fn parse_at(
        buf: &'a [u8],
        start: usize,
        site: Site,
        end: &mut usize,
    ) -> Result<Self, Invalid<'a>> {
        let mut f = LogFilter {
            members: [None; MEMBERS],
            object: RawJson::from_validated(&buf[start..start + 1]),
            site,
            one_address: None,
            topic_ends: [0; 4],
        };
        let mut walk = Members::at(buf, start);
        while let Some((key, value_start)) = walk.next_name() {
            // One name after another, not a `match`: its jump on the
            // name's length mispredicted as the members came in the
            // clients' different orders.
            let member = match_key(key, |k| {
                if k == b"topics" {
                    Some(Member::Topics)
                } else if k == b"address" {
                    Some(Member::Address)
                } else if k == b"fromBlock" {
                    Some(Member::FromBlock)
                } else if k == b"toBlock" {
                    Some(Member::ToBlock)
                } else if k == b"blockHash" {
                    Some(Member::BlockHash)
                } else {
                    None
                }
            });
            // Addresses and topics are decoded where their end is found.
            let value_end = match member {
                Some(Member::Address) => match hex::fixed_at::<20>(buf, value_start) {
                    Some((a, end)) => {
                        f.one_address = Some(Address::from(a));
                        end
                    }
                    None => skip_value(buf, value_start),
                },
                Some(Member::Topics) if buf.get(value_start) == Some(&b'[') => {
                    read_topics(buf, value_start, &mut f.topic_ends)
                }
                _ => skip_value(buf, value_start),
            };
            walk.value_ended(value_end);
            let value = RawJson::from_validated(&buf[value_start..value_end]);
            if let Some(m) = member
                && f.members[m as usize].replace(value).is_some()
            {
                return Err(Invalid::new(Reason::DuplicateMember, value)
                    .in_field(MEMBER_NAMES[m as usize])
                    .at_site(site));
            }
        }
        *end = walk.end().unwrap_or(buf.len());
        f.object = RawJson::from_validated(&buf[start..*end]);
        let set = |m: Option<RawJson<'_>>| m.is_some_and(|v| !v.is_null());
        let [from, to, hash] = [Member::FromBlock, Member::ToBlock, Member::BlockHash]
            .map(|m| set(f.members[m as usize]));
        if hash && (from || to) {
            return Err(Invalid::new(Reason::HashWithRange, f.object).at_site(site));
        }
        Ok(f)
    }

    /// The whole object, raw.
    pub fn as_json(&self) -> RawJson<'a> {
        self.object
    }

    #[inline(always)]
    fn decode<T>(
        &self,
        member: Member,
        f: impl FnOnce(RawJson<'a>) -> Result<T, Invalid<'a>>,
    ) -> Result<Option<T>, Invalid<'a>> {
        match self.members[member as usize].filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => f(v)
                .map(Some)
                .map_err(|e| e.in_field(MEMBER_NAMES[member as usize]).at_site(self.site)),
        }
    }

    // The accessors are `#[inline]`: called across crates, each returned
    // its `Result<Option<_>, Invalid>` (about 80 bytes) through memory to
    // the handler, which read it back (callgrind, `eth_getLogs` with them
    // inlined: 2,474 -> 2,298 instructions a decode).

    /// `fromBlock`.
    #[inline]
    pub fn from_block(&self) -> Result<Option<BlockNumberOrTag>, Invalid<'a>> {
        self.decode(Member::FromBlock, EthValue::block_number)
    }

    /// `toBlock`.
    #[inline]
    pub fn to_block(&self) -> Result<Option<BlockNumberOrTag>, Invalid<'a>> {
        self.decode(Member::ToBlock, EthValue::block_number)
    }

    /// `blockHash` (EIP-234).
    #[inline]
    pub fn block_hash(&self) -> Result<Option<B256>, Invalid<'a>> {
        self.decode(Member::BlockHash, EthValue::hash)
    }

    /// `address`: one address or an array of them; empty when absent,
    /// `null` or `[]` (no filter on the address, as geth reads an empty
    /// list).
    #[inline]
    pub fn addresses(&self) -> Result<Addresses<'a>, Invalid<'a>> {
        let site = self.site;
        if let Some(a) = self.one_address {
            return Ok(Addresses {
                inner: AddressesInner::Read(a),
                site,
            });
        }
        let inner = match self.members[Member::Address as usize].filter(|v| !v.is_null()) {
            None => AddressesInner::None,
            Some(v) => match v.kind() {
                Kind::String => AddressesInner::One(v),
                // `[]`: found at its first byte, without walking an element.
                Kind::Array if Elements::new(v).peek().is_none() => AddressesInner::None,
                Kind::Array => AddressesInner::Many(Elements::new(v)),
                _ => {
                    return Err(Invalid::new(Reason::NotAddresses, v)
                        .in_field("address")
                        .at_site(site));
                }
            },
        };
        Ok(Addresses { inner, site })
    }

    /// `topics`: one [`TopicFilter`] per position, at most four (a fifth
    /// position is an error when the iteration reaches it); empty when
    /// absent or `null`.
    #[inline]
    pub fn topics(&self) -> Result<Topics<'a>, Invalid<'a>> {
        let site = self.site;
        let ends = self.topic_ends;
        let values = match self.members[Member::Topics as usize].filter(|v| !v.is_null()) {
            None => None,
            Some(v) if v.kind() == Kind::Array => Some((v, Elements::new(v))),
            Some(v) => {
                return Err(Invalid::new(Reason::NotTopics, v)
                    .in_field("topics")
                    .at_site(site));
            }
        };
        Ok(Topics {
            values,
            ends,
            seen: 0,
            site,
        })
    }
}

/// The addresses of a [`LogFilter`], each decoded as it is reached.
#[derive(Clone, Debug)]
pub struct Addresses<'a> {
    inner: AddressesInner<'a>,
    site: Site,
}

#[derive(Clone, Debug)]
enum AddressesInner<'a> {
    None,
    /// One address, decoded by the filter's walk.
    Read(Address),
    One(RawJson<'a>),
    Many(Elements<'a>),
}

impl<'a> Addresses<'a> {
    /// Whether the filter names no address (matches every address).
    pub fn is_any(&self) -> bool {
        matches!(self.inner, AddressesInner::None)
    }
}

impl<'a> Iterator for Addresses<'a> {
    type Item = Result<Address, Invalid<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let v = match &mut self.inner {
            AddressesInner::None => return None,
            AddressesInner::Read(a) => {
                let a = *a;
                self.inner = AddressesInner::None;
                return Some(Ok(a));
            }
            AddressesInner::One(v) => {
                let v = *v;
                self.inner = AddressesInner::None;
                v
            }
            AddressesInner::Many(it) => {
                let (buf, start) = it.peek()?;
                if let Some((a, end)) = hex::fixed_at::<20>(buf, start) {
                    it.resume(end);
                    return Some(Ok(Address::from(a)));
                }
                it.next()?
            }
        };
        Some(
            v.address()
                .map_err(|e| e.in_field("address").at_site(self.site)),
        )
    }
}

/// The topic positions of a [`LogFilter`], each decoded as it is reached.
#[derive(Clone, Debug)]
pub struct Topics<'a> {
    /// The array (for errors) and its walk.
    values: Option<(RawJson<'a>, Elements<'a>)>,
    /// Where the filter's walk found the first positions to end.
    ends: TopicEnds,
    seen: u8,
    site: Site,
}

/// What one topic position matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicFilter<'a> {
    /// Any topic (`null`, or an array holding `null`, as geth reads it).
    Any,
    /// This topic.
    One(B256),
    /// Any of these topics (an array of hashes, never empty: no
    /// alternatives is [`Any`](TopicFilter::Any)).
    AnyOf(TopicSet<'a>),
}

/// The alternatives of one topic position, each decoded as it is reached.
#[derive(Clone, Debug)]
pub struct TopicSet<'a> {
    values: Elements<'a>,
    site: Site,
}

impl PartialEq for TopicSet<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.clone()
            .map(|t| t.ok())
            .eq(other.clone().map(|t| t.ok()))
    }
}

impl Eq for TopicSet<'_> {}

impl<'a> Iterator for TopicSet<'a> {
    type Item = Result<B256, Invalid<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (buf, start) = self.values.peek()?;
        if let Some((h, end)) = hex::fixed_at::<32>(buf, start) {
            self.values.resume(end);
            return Some(Ok(B256::from(h)));
        }
        let v = self.values.next()?;
        Some(
            v.hash()
                .map_err(|e| e.in_field("topics").at_site(self.site)),
        )
    }
}

impl<'a> Iterator for Topics<'a> {
    type Item = Result<TopicFilter<'a>, Invalid<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (array, values) = self.values.as_mut()?;
        let site = self.site;
        let fail = |e: Invalid<'a>| e.in_field("topics").at_site(site);
        let (buf, start) = values.peek()?;
        self.seen += 1;
        if self.seen > 4 {
            let array = *array;
            self.values = None;
            return Some(Err(fail(Invalid::new(Reason::TooManyTopics, array))));
        }
        if let Some((h, end)) = hex::fixed_at::<32>(buf, start) {
            values.resume(end);
            return Some(Ok(TopicFilter::One(B256::from(h))));
        }
        let v = match self.ends[usize::from(self.seen - 1)] {
            0 => values.next()?,
            end => {
                let end = end as usize;
                values.resume(end);
                RawJson::from_validated(&buf[start..end])
            }
        };
        Some(match v.kind() {
            Kind::Null => Ok(TopicFilter::Any),
            Kind::String => v.hash().map(TopicFilter::One).map_err(fail),
            Kind::Array => {
                let alternatives = Elements::new(v);
                // No alternatives, or a `null` among them, matches anything
                // (geth: "empty rule set == wildcard"); hex strings hold no
                // `n`, so most arrays are ruled out at once.
                if alternatives.clone().peek().is_none() {
                    Ok(TopicFilter::Any)
                } else if memchr::memchr(b'n', v.as_bytes()).is_some()
                    && alternatives.clone().any(|t| t.is_null())
                {
                    // The other alternatives must still be topics: alloy
                    // refuses an invalid one wherever it stands, geth one
                    // before the first `null`.
                    match alternatives
                        .filter(|t| !t.is_null())
                        .find_map(|t| t.hash().err())
                    {
                        Some(e) => Err(fail(e)),
                        None => Ok(TopicFilter::Any),
                    }
                } else {
                    Ok(TopicFilter::AnyOf(TopicSet {
                        values: alternatives,
                        site,
                    }))
                }
            }
            _ => Err(fail(Invalid::new(Reason::NotTopics, v))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every position and address as the filter gives them, errors
    /// included.
    fn read_all<'a>(f: &LogFilter<'a>) -> String {
        let topics: Vec<String> = match f.topics() {
            Ok(t) => t
                .map(|t| match t {
                    Ok(TopicFilter::AnyOf(set)) => format!("{:?}", set.collect::<Vec<_>>()),
                    other => format!("{other:?}"),
                })
                .collect(),
            Err(e) => vec![format!("{e:?}")],
        };
        let addresses: Vec<String> = match f.addresses() {
            Ok(a) => a.map(|a| format!("{a:?}")).collect(),
            Err(e) => vec![format!("{e:?}")],
        };
        format!("{topics:?} {addresses:?}")
    }

    #[test]
    fn what_the_walk_decodes_reads_as_the_text_does() {
        // The filter's walk decodes an address and records where the
        // first topic positions end; with those forgotten, the same
        // filter must read the same from the text.
        let h = format!("\"0x{}\"", "ab".repeat(32));
        let a = format!("\"0x{}\"", "cd".repeat(20));
        let bad = format!("\"0x{}\"", "zz".repeat(32));
        let short = "\"0x12\"";
        let positions = [
            String::new(),
            h.clone(),
            format!("{h},null"),
            format!("null,{h}"),
            format!("{h}, null , {h}"),
            format!("{h},[{h},{h}],{h}"),
            format!("[null,{h}]"),
            format!("{h},{h},{h},{h}"),
            format!("{h},{h},{h},{h},{h}"),
            "null,null,null,null,null".to_string(),
            format!("{h},{bad},{h}"),
            bad.clone(),
            format!("{h},{short}"),
            format!("{h},[]"),
            format!(" {h} "),
        ];
        let addresses = [
            None,
            Some(a.clone()),
            Some(format!("[{a},{a}]")),
            Some(short.to_string()),
            Some("null".to_string()),
            Some(format!(" {a} ")),
        ];
        let mut checked = 0;
        for topics in &positions {
            for address in &addresses {
                for topics_first in [false, true] {
                    let t = format!("\"topics\":[{topics}]");
                    let mut members = vec![t, "\"fromBlock\":\"0x1\"".to_string()];
                    if let Some(address) = address {
                        members.push(format!("\"address\" : {address}"));
                    }
                    if topics_first {
                        members.reverse();
                    }
                    let text = format!("[{{{}}}]", members.join(","));
                    let msg = format!(
                        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":{text}}}"#
                    );
                    let arena = bumpalo::Bump::new();
                    let parsed = crate::parse(msg.as_bytes(), &arena).unwrap();
                    let p = parsed.into_single().unwrap().request().unwrap().params();
                    let mut ps = super::super::EthParams::new(p);
                    let f = ps.next_log_filter("filter").unwrap();
                    let mut plain = f;
                    plain.topic_ends = [0; 4];
                    plain.one_address = None;
                    assert_eq!(read_all(&f), read_all(&plain), "{text}");
                    // And through the slow path (`log_filter` on the value).
                    let mut ps = super::super::EthParams::new(p);
                    let g = ps.required("filter").unwrap().log_filter().unwrap();
                    assert_eq!(read_all(&g), read_all(&plain), "{text}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, positions.len() * addresses.len() * 2);
    }
}
