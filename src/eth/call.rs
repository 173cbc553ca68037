//! The call object of `eth_call`, `eth_estimateGas`,
//! `eth_createAccessList`, `eth_sendTransaction`, `debug_traceCall`…:
//! [`CallRequest`].

use alloy_primitives::{Address, B256, U256};
use bumpalo::Bump;

use super::block::match_key;
use super::decode::{EthValue, Hex, Invalid, Reason, Site};
use super::hex;
use super::walk::{Elements, Members};
use crate::json::{Kind, RawJson};

/// Declares the members: the enum indexing them, their wire names, and the
/// key match (a `match` on byte strings: the length first, then the bytes).
macro_rules! members {
    ($($variant:ident = $wire:literal,)*) => {
        #[derive(Clone, Copy)]
        #[repr(u8)]
        enum Member { $($variant,)* }

        const COUNT: usize = [$(stringify!($variant)),*].len();

        const NAMES: [&str; COUNT] = [$(
            match core::str::from_utf8($wire) {
                Ok(s) => s,
                Err(_) => panic!("member names are ASCII"),
            }
        ),*];

        #[inline]
        fn member_of(key: &[u8]) -> Option<Member> {
            Some(match key {
                $($wire => Member::$variant,)*
                _ => return None,
            })
        }
    };
}

members! {
    From = b"from",
    To = b"to",
    Gas = b"gas",
    GasPrice = b"gasPrice",
    MaxFeePerGas = b"maxFeePerGas",
    MaxPriorityFeePerGas = b"maxPriorityFeePerGas",
    MaxFeePerBlobGas = b"maxFeePerBlobGas",
    Value = b"value",
    Data = b"data",
    Input = b"input",
    Nonce = b"nonce",
    ChainId = b"chainId",
    Type = b"type",
    AccessList = b"accessList",
    BlobVersionedHashes = b"blobVersionedHashes",
    AuthorizationList = b"authorizationList",
    Blobs = b"blobs",
    Commitments = b"commitments",
    Proofs = b"proofs",
}

/// [`member_of`] with the names nearly every call object holds tested
/// first, one after another: the `match` branches on the name's length
/// through a jump table, an indirect branch that a mix of `to` (2 bytes),
/// `data` and `from` (4) kept mispredicting.
#[inline(always)]
fn common_member_of(key: &[u8]) -> Option<Member> {
    if key == b"to" {
        Some(Member::To)
    } else if key == b"data" {
        Some(Member::Data)
    } else if key == b"from" {
        Some(Member::From)
    } else {
        member_of(key)
    }
}

/// A call object (geth's `TransactionArgs`, alloy's `TransactionRequest`),
/// borrowed from the message: the members are found in one pass over the
/// object and kept raw; each accessor decodes its member on request and
/// returns `Ok(None)` when it is absent or `null`.
///
/// Unknown members are ignored (as geth and alloy do); a member given twice
/// is refused. The errors name the member (`"field"`) and, for a call
/// object read through [`Param`](super::Param), the parameter.
///
/// ```
/// use rpcwire::eth::EthParams;
///
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48","data":"0x70a08231","gas":"0x5208"},"latest"]}"#, &arena).unwrap();
/// let mut p = EthParams::new(msg.into_single().unwrap().request().unwrap().params());
/// let tx = p.required("transaction")?.call_request()?;
/// assert_eq!(tx.gas()?, Some(21_000));
/// assert_eq!(tx.from()?, None);
/// assert_eq!(tx.input()?.unwrap().decode_in(&arena), &[0x70, 0xa0, 0x82, 0x31]);
/// assert_eq!(tx.to()?.unwrap()[0], 0xa0);
/// # Ok::<(), rpcwire::RpcError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CallRequest<'a> {
    /// Where each member's value lies in `object`. Offsets, not slices:
    /// the view, zeroed and copied once per decode, is about half the
    /// size (192 bytes, from 344).
    members: [Span; COUNT],
    object: RawJson<'a>,
    site: Site,
}

/// A member's value as its offset and length in the object; length 0 when
/// absent (no JSON value is empty).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    at: u32,
    len: u32,
}

impl<'a> CallRequest<'a> {
    pub(crate) fn parse(v: RawJson<'a>, site: Site) -> Result<Self, Invalid<'a>> {
        if v.kind() != Kind::Object {
            return Err(Invalid::new(Reason::NotObject, v));
        }
        CallRequest::parse_at(v.as_bytes(), 0, site, &mut 0)
    }

    /// Reads the object whose `{` is at `buf[start]` in one walk, and
    /// sets `end` to the index after it. (The view is built where it is
    /// returned, and the end given apart, so that the view is not copied
    /// again on its way out.)
    pub(crate) fn parse_at(
        buf: &'a [u8],
        start: usize,
        site: Site,
        end: &mut usize,
    ) -> Result<Self, Invalid<'a>> {
        let mut call = CallRequest {
            members: [Span::default(); COUNT],
            object: RawJson::from_validated(&buf[start..start + 1]),
            site,
        };
        let mut walk = Members::at(buf, start);
        for (key, value) in walk.by_ref() {
            if let Some(m) = match_key(key, common_member_of) {
                let span = &mut call.members[m as usize];
                if span.len != 0 {
                    return Err(
                        Invalid::new(Reason::DuplicateMember, value).in_field(NAMES[m as usize])
                    );
                }
                // The value is a slice of `buf` after the object's start.
                let at = value.as_bytes().as_ptr().addr() - buf.as_ptr().addr() - start;
                match (u32::try_from(at), u32::try_from(value.as_bytes().len())) {
                    (Ok(at), Ok(len)) => *span = Span { at, len },
                    _ => return Err(Invalid::new(Reason::ObjectTooLarge, value)),
                }
            }
        }
        *end = walk.end().unwrap_or(buf.len());
        call.object = RawJson::from_validated(&buf[start..*end]);
        Ok(call)
    }

    /// The whole object, raw.
    pub fn as_json(&self) -> RawJson<'a> {
        self.object
    }

    /// The raw value of the member `name` (one of the members this view
    /// knows: `from`, `to`, `gas`, `gasPrice`, `maxFeePerGas`,
    /// `maxPriorityFeePerGas`, `maxFeePerBlobGas`, `value`, `data`, `input`,
    /// `nonce`, `chainId`, `type`, `accessList`, `blobVersionedHashes`,
    /// `authorizationList`, `blobs`, `commitments`, `proofs`), `None` if
    /// absent, `null` or unknown.
    pub fn raw(&self, name: &str) -> Option<RawJson<'a>> {
        self.get(member_of(name.as_bytes())?)
    }

    /// The member's raw value, `null` included.
    #[inline(always)]
    fn member(&self, m: Member) -> Option<RawJson<'a>> {
        self.member_at(m as usize)
    }

    /// [`member`](Self::member) by the member's index.
    #[inline(always)]
    fn member_at(&self, k: usize) -> Option<RawJson<'a>> {
        let Span { at, len } = self.members[k];
        if len == 0 {
            return None;
        }
        let (at, len) = (at as usize, len as usize);
        // A value the walk found in this object, cut at its bounds.
        Some(RawJson::from_validated(
            &self.object.as_bytes()[at..at + len],
        ))
    }

    #[inline(always)]
    fn get(&self, m: Member) -> Option<RawJson<'a>> {
        self.member(m).filter(|v| !v.is_null())
    }

    #[inline(always)]
    fn decode<T>(
        &self,
        m: Member,
        f: impl FnOnce(RawJson<'a>) -> Result<T, Invalid<'a>>,
    ) -> Result<Option<T>, Invalid<'a>> {
        match self.get(m) {
            None => Ok(None),
            Some(v) => f(v)
                .map(Some)
                .map_err(|e| e.in_field(NAMES[m as usize]).at_site(self.site)),
        }
    }

    // The accessors are `#[inline]`, as `LogFilter`'s are: across crates
    // each returned its `Result<Option<_>, Invalid>` through memory
    // (callgrind, `eth_call` with them inlined: about 9% fewer
    // instructions a decode).

    /// `from`: the sender.
    #[inline]
    pub fn from(&self) -> Result<Option<Address>, Invalid<'a>> {
        self.address(Member::From)
    }

    /// `to`: the recipient; `None` (absent or `null`) creates a contract.
    #[inline]
    pub fn to(&self) -> Result<Option<Address>, Invalid<'a>> {
        self.address(Member::To)
    }

    /// An address member, read as `next_address` reads one (the digits
    /// decoded where they lie) when it is plain, else by the general
    /// decoder, which also explains refusals.
    #[inline(always)]
    fn address(&self, m: Member) -> Result<Option<Address>, Invalid<'a>> {
        if let Some(v) = self.member(m)
            && let Some((a, end)) = hex::fixed_at::<20>(v.as_bytes(), 0)
            && end == v.as_bytes().len()
        {
            return Ok(Some(Address::from(a)));
        }
        self.decode(m, EthValue::address)
    }

    /// `gas`: the gas limit.
    #[inline]
    pub fn gas(&self) -> Result<Option<u64>, Invalid<'a>> {
        self.decode(Member::Gas, EthValue::quantity_u64)
    }

    /// `gasPrice` (legacy and EIP-2930 transactions), in wei.
    ///
    /// The fee members are read into a `u128`, as alloy's
    /// `TransactionRequest` has them: a fee past 128 bits (the spec's
    /// `uint` has no width, and geth reads up to 256) is refused with
    /// "more than 128 bits". No chain's fee comes near.
    #[inline]
    pub fn gas_price(&self) -> Result<Option<u128>, Invalid<'a>> {
        self.decode(Member::GasPrice, EthValue::quantity_u128)
    }

    /// `maxFeePerGas` (EIP-1559), in wei.
    #[inline]
    pub fn max_fee_per_gas(&self) -> Result<Option<u128>, Invalid<'a>> {
        self.decode(Member::MaxFeePerGas, EthValue::quantity_u128)
    }

    /// `maxPriorityFeePerGas` (EIP-1559), in wei.
    #[inline]
    pub fn max_priority_fee_per_gas(&self) -> Result<Option<u128>, Invalid<'a>> {
        self.decode(Member::MaxPriorityFeePerGas, EthValue::quantity_u128)
    }

    /// `maxFeePerBlobGas` (EIP-4844), in wei.
    #[inline]
    pub fn max_fee_per_blob_gas(&self) -> Result<Option<u128>, Invalid<'a>> {
        self.decode(Member::MaxFeePerBlobGas, EthValue::quantity_u128)
    }

    /// `value`, in wei.
    #[inline]
    pub fn value(&self) -> Result<Option<U256>, Invalid<'a>> {
        self.decode(Member::Value, EthValue::quantity_u256)
    }

    /// `nonce`.
    #[inline]
    pub fn nonce(&self) -> Result<Option<u64>, Invalid<'a>> {
        self.decode(Member::Nonce, EthValue::quantity_u64)
    }

    /// `chainId`.
    #[inline]
    pub fn chain_id(&self) -> Result<Option<u64>, Invalid<'a>> {
        self.decode(Member::ChainId, EthValue::quantity_u64)
    }

    /// `type`: the EIP-2718 transaction type, the spec's `byte` (`0x2` or
    /// `0x02`; a longer QUANTITY is read too, up to 255).
    pub fn tx_type(&self) -> Result<Option<u8>, Invalid<'a>> {
        self.decode(Member::Type, |v| {
            let t = super::decode::text(v, hex::type_byte)?;
            u8::try_from(t).map_err(|_| Invalid::new(Reason::Overflow8, v))
        })
    }

    /// The call data: `input`, or `data` (older clients' name). Both may be
    /// given if they are equal, as geth and alloy allow.
    pub fn input(&self) -> Result<Option<Hex<'a>>, Invalid<'a>> {
        let input = self.decode(Member::Input, EthValue::data)?;
        let data = self.decode(Member::Data, EthValue::data)?;
        match (input, data) {
            (Some(i), Some(d)) if !same_hex(&i, &d) => Err(Invalid::new(
                Reason::DataInputDiffer,
                self.get(Member::Data).expect("present"),
            )
            // `received` shows `data`'s value: named, so that it is not
            // read as the call object's.
            .in_field(NAMES[Member::Data as usize])
            .at_site(self.site)),
            (Some(i), _) => Ok(Some(i)),
            (None, d) => Ok(d),
        }
    }

    /// The call data decoded into `arena`, checked and decoded in one pass
    /// (`input`, else `data`; when both are given they must be equal).
    #[inline]
    pub fn input_in<'b>(&self, arena: &'b Bump) -> Result<Option<&'b [u8]>, Invalid<'a>>
    where
        'a: 'b,
    {
        if self.get(Member::Input).is_some() && self.get(Member::Data).is_some() {
            return Ok(self.input()?.map(|h| h.decode_in(arena)));
        }
        let m = if self.get(Member::Input).is_some() {
            Member::Input
        } else {
            Member::Data
        };
        match self.get(m) {
            None => Ok(None),
            Some(v) => v
                .bytes_in(arena)
                .map(Some)
                .map_err(|e| e.in_field(NAMES[m as usize]).at_site(self.site)),
        }
    }

    /// `accessList` (EIP-2930), raw.
    pub fn access_list(&self) -> Option<RawJson<'a>> {
        self.get(Member::AccessList)
    }

    /// `authorizationList` (EIP-7702), raw.
    pub fn authorization_list(&self) -> Option<RawJson<'a>> {
        self.get(Member::AuthorizationList)
    }

    /// `blobVersionedHashes` (EIP-4844): each element decoded as a hash, in
    /// order; empty when absent.
    pub fn blob_versioned_hashes(
        &self,
    ) -> Result<impl Iterator<Item = Result<B256, Invalid<'a>>> + 'a, Invalid<'a>> {
        let site = self.site;
        let values = match self.get(Member::BlobVersionedHashes) {
            None => None,
            Some(v) if v.kind() == Kind::Array => Some(Elements::new(v)),
            Some(v) => {
                return Err(Invalid::new(Reason::NotArray, v)
                    .in_field("blobVersionedHashes")
                    .at_site(site));
            }
        };
        Ok(values.into_iter().flatten().map(move |h| {
            h.hash()
                .map_err(|e| e.in_field("blobVersionedHashes").at_site(site))
        }))
    }
}

fn same_hex(a: &Hex<'_>, b: &Hex<'_>) -> bool {
    match (a.digits(), b.digits()) {
        (Some(x), Some(y)) => x.eq_ignore_ascii_case(y),
        _ => a.to_vec() == b.to_vec(),
    }
}

impl core::fmt::Debug for CallRequest<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("CallRequest");
        for (k, name) in NAMES.iter().enumerate() {
            if let Some(v) = self.member_at(k) {
                d.field(name, &v);
            }
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(object: &str) -> Result<CallRequest<'_>, Invalid<'_>> {
        CallRequest::parse(RawJson::from_validated(object.as_bytes()), Site::default())
    }

    /// The members are found where the walk left them, `null` kept raw
    /// (and read as absent), others' text untouched.
    #[test]
    fn members_are_read_back_from_their_offsets() {
        let object = r#"{ "value" : "0x1", "to":null,"x":[1,{"gas":"0x2"}], "data": "0xab" }"#;
        let call = view(object).unwrap();
        assert_eq!(call.raw("value").unwrap().as_bytes(), b"\"0x1\"");
        assert_eq!(call.raw("data").unwrap().as_bytes(), b"\"0xab\"");
        assert!(call.raw("to").is_none() && call.raw("gas").is_none());
        assert_eq!(call.to().unwrap(), None);
        assert_eq!(
            format!("{call:?}"),
            r#"CallRequest { to: RawJson(null), value: RawJson("0x1"), data: RawJson("0xab") }"#
        );
        let e = view(r#"{"gas":"0x1","gas":"0x2"}"#).unwrap_err();
        assert_eq!(e.reason(), "duplicate member");
    }

    /// The view stays small: it is zeroed and copied once per decode.
    #[test]
    fn the_view_is_small() {
        assert!(
            size_of::<CallRequest<'_>>() <= 192,
            "{}",
            size_of::<CallRequest<'_>>()
        );
    }
}
