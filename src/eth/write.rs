//! Writers: Ethereum values as JSON, straight into a reply buffer
//! ([`ReplyBuf`] here, [`Reply`] through [`EthReply`]).
//!
//! Every writer builds its text on the stack and appends it in one copy
//! (DATA of any size in chunks), lowercase, as geth writes it; the
//! decoders read every output back.

use alloy_primitives::{Address, B256, U256};

use super::hex;
use crate::dispatch::{Done, Reply, ReplyBuf, RpcError};

/// `"0x…"`: a QUANTITY, lowercase hex without leading zeros (`"0x0"` for
/// zero).
///
/// ```
/// let mut out = Vec::new();
/// rpcwire::eth::write::quantity(&mut out, 0x1b4);
/// assert_eq!(out, br#""0x1b4""#);
/// ```
#[inline]
pub fn quantity<B: ReplyBuf + ?Sized>(out: &mut B, v: u128) {
    let mut buf = [0u8; 36];
    let n = quantity_text(v, &mut buf);
    out.extend_from_slice(&buf[..n]);
}

/// The core's writer: all sixteen digits of a `u64` at once, without a
/// loop or a table.
#[inline(always)]
fn quantity_text(v: u128, buf: &mut [u8; 36]) -> usize {
    crate::write::quantity_text(v, buf)
}

/// `"0x…"`: a 256-bit QUANTITY.
pub fn quantity_u256<B: ReplyBuf + ?Sized>(out: &mut B, v: &U256) {
    let mut buf = [0u8; 68];
    let n = quantity_u256_text(v, &mut buf);
    out.extend_from_slice(&buf[..n]);
}

#[inline(always)]
fn quantity_u256_text(v: &U256, buf: &mut [u8; 68]) -> usize {
    if let Ok(small) = u128::try_from(v) {
        let mut b = [0u8; 36];
        let n = quantity_text(small, &mut b);
        buf[..n].copy_from_slice(&b[..n]);
        return n;
    }
    hex::encode_quantity_be(&v.to_be_bytes::<32>(), v.leading_zeros() as u32, buf)
}

/// `"0x…"`: DATA, two lowercase hex digits per byte.
pub fn data<B: ReplyBuf + ?Sized>(out: &mut B, bytes: &[u8]) {
    out.reserve(2 * bytes.len() + 4);
    let mut buf = [0u8; 2 * CHUNK + 4];
    if bytes.len() <= CHUNK {
        let n = hex::encode_quoted(bytes, &mut buf);
        out.extend_from_slice(&buf[..n]);
        return;
    }
    out.extend_from_slice(b"\"0x");
    for chunk in bytes.chunks(CHUNK) {
        let n = 2 * chunk.len();
        const_hex::encode_to_slice(chunk, &mut buf[..n]).expect("sized for it");
        out.extend_from_slice(&buf[..n]);
    }
    out.push(b'"');
}

/// Bytes encoded per stack buffer.
const CHUNK: usize = 512;

/// `"0x…"`: an address, 40 lowercase hex digits (not EIP-55 checksummed,
/// as nodes answer).
#[inline]
pub fn address<B: ReplyBuf + ?Sized>(out: &mut B, a: &Address) {
    let mut buf = [0u8; 44];
    let n = hex::encode_quoted(a.as_slice(), &mut buf);
    out.extend_from_slice(&buf[..n]);
}

/// `"0x…"`: a hash, 64 lowercase hex digits.
#[inline]
pub fn hash<B: ReplyBuf + ?Sized>(out: &mut B, h: &B256) {
    let mut buf = [0u8; 68];
    let n = hex::encode_quoted(h.as_slice(), &mut buf);
    out.extend_from_slice(&buf[..n]);
}

/// Ethereum results written straight into a handler's [`Reply`]: with the
/// trait in scope, `call.reply.quantity(v)`, `.data(..)`, `.address(..)`
/// and so on (or `EthReply::quantity(call.reply, v)`).
///
/// Each method is bounded by the response size limit like `Reply`'s own
/// (a result past it becomes the "response too large" error).
///
/// ```
/// use rpcwire::eth::EthReply;
/// use rpcwire::{Call, Connection, Dispatcher};
/// use rpcwire::eth::{Address, U256};
///
/// let d = Dispatcher::builder(())
///     .method("eth_getBalance", |call: Call<'_, ()>| call.reply.quantity_u256(U256::from(10u64).pow(U256::from(18u64))))
///     .method("eth_coinbase", |call: Call<'_, ()>| call.reply.address(&Address::repeat_byte(0xab)))
///     .build()?;
/// let (mut conn, mut out) = (Connection::new(), Vec::new());
/// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance"}"#, &mut conn, &mut out);
/// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0xde0b6b3a7640000"}"#);
/// # Ok::<(), rpcwire::router::BuildError>(())
/// ```
pub trait EthReply: Sized + sealed::Sealed {
    /// A QUANTITY (`u64` values convert with `.into()`).
    fn quantity(self, v: u128) -> Result<Done, RpcError>;
    /// A 256-bit QUANTITY.
    fn quantity_u256(self, v: U256) -> Result<Done, RpcError>;
    /// DATA.
    fn data(self, bytes: &[u8]) -> Result<Done, RpcError>;
    /// An address.
    fn address(self, a: &Address) -> Result<Done, RpcError>;
    /// A hash.
    fn hash(self, h: &B256) -> Result<Done, RpcError>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::dispatch::Reply<'_> {}
}

impl EthReply for Reply<'_> {
    #[inline]
    fn quantity(self, v: u128) -> Result<Done, RpcError> {
        self.small::<36>(|buf| quantity_text(v, buf))
    }

    #[inline]
    fn quantity_u256(self, v: U256) -> Result<Done, RpcError> {
        self.small::<68>(|buf| quantity_u256_text(&v, buf))
    }

    fn data(self, bytes: &[u8]) -> Result<Done, RpcError> {
        if bytes.len() <= CHUNK {
            let mut buf = [0u8; 2 * CHUNK + 4];
            let n = hex::encode_quoted(bytes, &mut buf);
            return self.raw(&buf[..n]);
        }
        // Longer: streamed through serde_json's string writer in chunks
        // (no allocation; it stops at the size limit).
        self.json(&HexStr(bytes))
    }

    #[inline]
    fn address(self, a: &Address) -> Result<Done, RpcError> {
        self.small::<44>(|buf| hex::encode_quoted(a.as_slice(), buf))
    }

    #[inline]
    fn hash(self, h: &B256) -> Result<Done, RpcError> {
        self.small::<68>(|buf| hex::encode_quoted(h.as_slice(), buf))
    }
}

/// DATA as a string, written in chunks.
struct HexStr<'b>(&'b [u8]);

impl core::fmt::Display for HexStr<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("0x")?;
        let mut buf = [0u8; 2 * CHUNK];
        for chunk in self.0.chunks(CHUNK) {
            let n = 2 * chunk.len();
            const_hex::encode_to_slice(chunk, &mut buf[..n]).expect("sized for it");
            f.write_str(core::str::from_utf8(&buf[..n]).expect("hex is ASCII"))?;
        }
        Ok(())
    }
}

impl serde::Serialize for HexStr<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
