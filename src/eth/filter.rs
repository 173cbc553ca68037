//! The log filter of `eth_getLogs` and `eth_newFilter`: [`LogFilter`],
//! its [`Addresses`] and [`Topics`].

use alloy_primitives::{Address, B256};

use super::block::{BlockNumberOrTag, match_key};
use super::decode::{EthValue, Invalid, Reason, Site};
use super::hex;
use super::walk::{Elements, Members};
use crate::json::{Kind, RawJson};

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
    from_block: Option<RawJson<'a>>,
    to_block: Option<RawJson<'a>>,
    block_hash: Option<RawJson<'a>>,
    address: Option<RawJson<'a>>,
    topics: Option<RawJson<'a>>,
    object: RawJson<'a>,
    site: Site,
}

impl<'a> LogFilter<'a> {
    pub(crate) fn parse(v: RawJson<'a>, site: Site) -> Result<Self, Invalid<'a>> {
        if v.kind() != Kind::Object {
            return Err(Invalid::new(Reason::NotObject, v).at_site(site));
        }
        Ok(LogFilter::parse_at(v.as_bytes(), 0, site)?.0)
    }

    /// Reads the object whose `{` is at `buf[start]` in one walk, and
    /// returns the index after it too.
    pub(crate) fn parse_at(
        buf: &'a [u8],
        start: usize,
        site: Site,
    ) -> Result<(Self, usize), Invalid<'a>> {
        let mut f = LogFilter {
            from_block: None,
            to_block: None,
            block_hash: None,
            address: None,
            topics: None,
            object: RawJson::from_validated(&buf[start..start + 1]),
            site,
        };
        let mut walk = Members::at(buf, start);
        for (key, value) in walk.by_ref() {
            let slot = match_key(key, |k| {
                Some(match k {
                    b"fromBlock" => (&mut f.from_block, "fromBlock"),
                    b"toBlock" => (&mut f.to_block, "toBlock"),
                    b"blockHash" => (&mut f.block_hash, "blockHash"),
                    b"address" => (&mut f.address, "address"),
                    b"topics" => (&mut f.topics, "topics"),
                    _ => return None,
                })
            });
            if let Some((slot, name)) = slot
                && slot.replace(value).is_some()
            {
                return Err(Invalid::new(Reason::DuplicateMember, value)
                    .in_field(name)
                    .at_site(site));
            }
        }
        let end = walk.end().unwrap_or(buf.len());
        f.object = RawJson::from_validated(&buf[start..end]);
        let set = |m: Option<RawJson<'_>>| m.is_some_and(|v| !v.is_null());
        if set(f.block_hash) && (set(f.from_block) || set(f.to_block)) {
            return Err(Invalid::new(Reason::HashWithRange, f.object).at_site(site));
        }
        Ok((f, end))
    }

    /// The whole object, raw.
    pub fn as_json(&self) -> RawJson<'a> {
        self.object
    }

    #[inline(always)]
    fn decode<T>(
        &self,
        member: Option<RawJson<'a>>,
        name: &'static str,
        f: impl FnOnce(RawJson<'a>) -> Result<T, Invalid<'a>>,
    ) -> Result<Option<T>, Invalid<'a>> {
        match member.filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => f(v)
                .map(Some)
                .map_err(|e| e.in_field(name).at_site(self.site)),
        }
    }

    /// `fromBlock`.
    pub fn from_block(&self) -> Result<Option<BlockNumberOrTag>, Invalid<'a>> {
        self.decode(self.from_block, "fromBlock", EthValue::block_number)
    }

    /// `toBlock`.
    pub fn to_block(&self) -> Result<Option<BlockNumberOrTag>, Invalid<'a>> {
        self.decode(self.to_block, "toBlock", EthValue::block_number)
    }

    /// `blockHash` (EIP-234).
    pub fn block_hash(&self) -> Result<Option<B256>, Invalid<'a>> {
        self.decode(self.block_hash, "blockHash", EthValue::hash)
    }

    /// `address`: one address or an array of them; empty when absent,
    /// `null` or `[]` (no filter on the address, as geth reads an empty
    /// list).
    pub fn addresses(&self) -> Result<Addresses<'a>, Invalid<'a>> {
        let site = self.site;
        let inner = match self.address.filter(|v| !v.is_null()) {
            None => AddressesInner::None,
            Some(v) => match v.kind() {
                Kind::String => AddressesInner::One(v),
                Kind::Array if Elements::new(v).next().is_none() => AddressesInner::None,
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
    pub fn topics(&self) -> Result<Topics<'a>, Invalid<'a>> {
        let site = self.site;
        let values = match self.topics.filter(|v| !v.is_null()) {
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

    fn next(&mut self) -> Option<Self::Item> {
        let v = match &mut self.inner {
            AddressesInner::None => return None,
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
        let v = values.next()?;
        Some(match v.kind() {
            Kind::Null => Ok(TopicFilter::Any),
            Kind::String => v.hash().map(TopicFilter::One).map_err(fail),
            Kind::Array => {
                let alternatives = Elements::new(v);
                // No alternatives, or a `null` among them, matches anything
                // (geth: "empty rule set == wildcard"); hex strings hold no
                // `n`, so most arrays are ruled out at once.
                if alternatives.clone().next().is_none() {
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
