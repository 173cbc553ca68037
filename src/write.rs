//! Writing JSON straight into the caller's buffer: escaped strings, integers,
//! Ethereum hex quantities and data.

use crate::dispatch::ReplyBuf;
use crate::scan::arch;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The largest index at most `at` (and at most `text`'s length) where a
/// character of `text` starts: where to cut a text shown in part.
#[cfg(any(feature = "eth", feature = "mcp"))]
pub(crate) fn char_floor(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Appends `s` as a JSON string, quotes included, escaping `"`, `\` and
/// control characters. Runs without escapes are copied whole.
pub(crate) fn string<B: ReplyBuf + ?Sized>(out: &mut B, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut from = 0;
    loop {
        let stop = arch::find_string_stop(bytes, from).at;
        out.extend_from_slice(&bytes[from..stop]);
        let Some(&b) = bytes.get(stop) else { break };
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ]),
        }
        from = stop + 1;
    }
    out.push(b'"');
}

/// The bytes [`string`] writes for `b`, a byte of its text.
pub(crate) fn escaped_len(b: u8) -> usize {
    match b {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' => 2,
        0..=0x1f => 6,
        _ => 1,
    }
}

pub(crate) fn u64<B: ReplyBuf + ?Sized>(out: &mut B, v: u64) {
    let mut buf = [0u8; 20];
    let digits = crate::error::fmt_u64(v, &mut buf).len();
    // The digits sit at the end of `buf`: move them to the front.
    buf.copy_within(20 - digits.., 0);
    fixed_then_cut(out, &buf, digits);
}

pub(crate) fn i64<B: ReplyBuf + ?Sized>(out: &mut B, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    u64(out, v.unsigned_abs());
}

/// `"0x…"`: lowercase hex without leading zeros, zero as `"0x0"` (an
/// Ethereum QUANTITY). Built on the stack and appended in one copy.
#[allow(dead_code)] // Used by the Ethereum layer and the tests.
pub(crate) fn quantity<B: ReplyBuf + ?Sized>(out: &mut B, v: u128) {
    let mut buf = [0u8; 36];
    let len = quantity_text(v, &mut buf);
    fixed_then_cut(out, &buf, len);
}

/// `"0x…"` for `v` at the front of `buf`; returns its length.
#[inline(always)]
pub(crate) fn quantity_text(v: u128, buf: &mut [u8; 36]) -> usize {
    let (hi, lo) = ((v >> 64) as u64, v as u64);
    buf[..3].copy_from_slice(b"\"0x");
    let digits = if hi == 0 {
        // The common case (block numbers, balances in wei below 2^64, gas):
        // the digits computed at once and written with one store.
        let digits = (16 - lo.leading_zeros() as usize / 4).max(1);
        buf[3..19].copy_from_slice(&hex_front(lo, digits));
        digits
    } else {
        let high = 16 - hi.leading_zeros() as usize / 4;
        buf[3..19].copy_from_slice(&hex_front(hi, high));
        buf[3 + high..19 + high].copy_from_slice(&hex_front(lo, 16));
        high + 16
    };
    buf[3 + digits] = b'"';
    digits + 4
}

/// The last `digits` lowercase hex digits of `v`, most significant first,
/// at the front of the array (the rest is junk).
#[inline(always)]
fn hex_front(v: u64, digits: usize) -> [u8; 16] {
    // Drop the leading digits: byte i of `hex16_le` is digit i (least
    // significant first), so shifting them up and swapping the bytes puts
    // the kept ones first.
    let shift = 8 * (16 - digits) as u32;
    (hex16_le(v) << shift).swap_bytes().to_le_bytes()
}

/// The sixteen lowercase hex digits of `v` as the bytes of a `u128`, least
/// significant digit in the lowest byte, without a loop: each nibble is
/// spread into a byte, then turned into its ASCII digit all at once.
#[inline(always)]
fn hex16_le(v: u64) -> u128 {
    let mut x = v as u128;
    x = (x | (x << 32)) & 0x0000_0000_FFFF_FFFF_0000_0000_FFFF_FFFF;
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF_0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF_00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F;
    // Byte i now holds nibble i (least significant first): digits 10-15
    // get 'a' - '0' - 10 = 39 more than '0' + n.
    let letters = ((x + 0x0606_0606_0606_0606_0606_0606_0606_0606) >> 4)
        & 0x0101_0101_0101_0101_0101_0101_0101_0101;
    x + 0x3030_3030_3030_3030_3030_3030_3030_3030 + letters * 39
}

/// Appends `buf[..len]`: copies the whole fixed-size buffer (inline moves,
/// no `memcpy` call, which costs more than a short reply itself) and cuts
/// the excess off again.
#[inline(always)]
fn fixed_then_cut<B: ReplyBuf + ?Sized, const N: usize>(out: &mut B, buf: &[u8; N], len: usize) {
    let at = out.len();
    out.extend_from_slice(buf);
    out.truncate(at + len);
}

/// Appends `bytes`; short ones (ids) without a `memcpy` call: their bytes
/// are gathered into one integer with overlapping word loads, as the
/// router's keys are, and appended whole. (Gathered into a stack buffer by
/// pieces and copied from there in one 16-byte load, they waited for the
/// pieces' stores: a store-forwarding stall in every reply.)
#[inline(always)]
pub(crate) fn small<B: ReplyBuf + ?Sized>(out: &mut B, bytes: &[u8]) {
    let n = bytes.len();
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let quad = |at: usize| {
        let mut q = [0u8; 4];
        q.copy_from_slice(&bytes[at..at + 4]);
        u32::from_le_bytes(q) as u64
    };
    let byte = |at: usize| (bytes[at] as u64) << (8 * at);
    // Bytes 0..8 and 8..16, each in a word.
    let (low, high) = if n > 16 {
        out.extend_from_slice(bytes);
        return;
    } else if n > 8 {
        // The last word's bytes past the first word's.
        (word(0), word(n - 8) >> (8 * (16 - n)))
    } else if n == 8 {
        (word(0), 0)
    } else if n >= 4 {
        (quad(0) | quad(n - 4) << (8 * (n - 4)), 0)
    } else if n > 0 {
        (byte(0) | byte(n / 2) | byte(n - 1), 0)
    } else {
        (0, 0)
    };
    let gathered = low as u128 | (high as u128) << 64;
    fixed_then_cut(out, &gathered.to_le_bytes(), n);
}

/// `"0x…"`: two lowercase hex digits per byte (an Ethereum DATA).
#[cfg(test)]
pub(crate) fn hex_data<B: ReplyBuf + ?Sized>(out: &mut B, bytes: &[u8]) {
    out.reserve(bytes.len() * 2 + 4);
    out.extend_from_slice(b"\"0x");
    let mut pair = [0u8; 128];
    for chunk in bytes.chunks(64) {
        for (i, &b) in chunk.iter().enumerate() {
            pair[2 * i] = HEX[(b >> 4) as usize];
            pair[2 * i + 1] = HEX[(b & 15) as usize];
        }
        out.extend_from_slice(&pair[..2 * chunk.len()]);
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_round_trip_through_serde_json() {
        for s in [
            "",
            "plain",
            "q\"b\\s/",
            "\n\r\t\u{0}\u{1f}\u{7f}",
            "é東😀",
            &"x".repeat(100),
            "a\"".repeat(40).as_str(),
        ] {
            let json = w(|o| string(o, s));
            assert_eq!(serde_json::from_str::<String>(&json).unwrap(), s, "{json}");
        }
        assert_eq!(w(|o| string(o, "\u{1}")), r#""\u0001""#);
    }

    #[test]
    fn small_copies_every_length() {
        for n in 0..40 {
            let src: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
            let mut out = b"pre".to_vec();
            small(&mut out, &src);
            assert_eq!(&out[3..], &src[..], "{n}");
        }
    }

    #[test]
    fn numbers_and_hex() {
        assert_eq!(w(|o| u64(o, 0)), "0");
        assert_eq!(w(|o| u64(o, u64::MAX)), "18446744073709551615");
        assert_eq!(w(|o| i64(o, i64::MIN)), "-9223372036854775808");
        assert_eq!(w(|o| i64(o, -5)), "-5");
        assert_eq!(w(|o| quantity(o, 0)), r#""0x0""#);
        for v in [
            1u128,
            9,
            10,
            15,
            16,
            0xabc,
            u64::MAX as u128,
            (u64::MAX as u128) + 1,
            1 << 100,
        ] {
            assert_eq!(w(|o| quantity(o, v)), format!("\"0x{v:x}\""), "{v}");
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x as u128) << (x % 70) >> (x % 5);
            assert_eq!(w(|o| quantity(o, v)), format!("\"0x{v:x}\""), "{v}");
        }
        assert_eq!(w(|o| quantity(o, 0x400)), r#""0x400""#);
        assert_eq!(w(|o| quantity(o, 0x1b4)), r#""0x1b4""#);
        assert_eq!(
            w(|o| quantity(o, u128::MAX)),
            format!("\"0x{}\"", "f".repeat(32))
        );
        assert_eq!(w(|o| hex_data(o, &[])), r#""0x""#);
        assert_eq!(w(|o| hex_data(o, &[0, 0x0f, 0xab])), r#""0x000fab""#);
    }
}
