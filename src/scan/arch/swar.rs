//! The portable backend: eight bytes at a time in a `u64`.

use super::{Stop, naive};

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// High bit set in each byte of `x` that is zero. Bytes above the first zero
/// byte may be flagged falsely (a borrow carries into them), but the lowest
/// flag is always exact, which is all the scan uses.
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(LO) & !x & HI
}

/// High bit set in each byte of `x` below `n` (`n <= 0x80`), with the same
/// guarantee as [`zero_bytes`]: the lowest flag is exact.
#[inline(always)]
fn bytes_below(x: u64, n: u8) -> u64 {
    x.wrapping_sub(LO * n as u64) & !x & HI
}

pub(crate) fn find_string_stop(buf: &[u8], start: usize) -> Stop {
    let mut pos = start;
    let mut high = 0u64;
    while let Some(chunk) = buf.get(pos..pos + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap());
        let stops = zero_bytes(x ^ (LO * b'"' as u64))
            | zero_bytes(x ^ (LO * b'\\' as u64))
            | bytes_below(x, 0x20);
        if stops != 0 {
            let lane = stops.trailing_zeros() / 8;
            // Keep the high bits of the lanes before the stop only.
            let before = (1u64 << (lane * 8)) - 1;
            high |= x & HI & before;
            return Stop {
                at: pos + lane as usize,
                non_ascii: high != 0,
            };
        }
        high |= x & HI;
        pos += 8;
    }
    let tail = naive::find_string_stop(buf, pos);
    Stop {
        at: tail.at,
        non_ascii: tail.non_ascii || high != 0,
    }
}

pub(crate) fn find_ascii_stop(buf: &[u8], start: usize) -> usize {
    let mut pos = start;
    while let Some(chunk) = buf.get(pos..pos + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap());
        let stops = zero_bytes(x ^ (LO * b'"' as u64))
            | zero_bytes(x ^ (LO * b'\\' as u64))
            | bytes_below(x, 0x20)
            | (x & HI);
        if stops != 0 {
            return pos + (stops.trailing_zeros() / 8) as usize;
        }
        pos += 8;
    }
    naive::find_ascii_stop(buf, pos)
}

pub(crate) fn find_quote_or_backslash(buf: &[u8], start: usize) -> usize {
    let mut pos = start;
    while let Some(chunk) = buf.get(pos..pos + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap());
        let stops = zero_bytes(x ^ (LO * b'"' as u64)) | zero_bytes(x ^ (LO * b'\\' as u64));
        if stops != 0 {
            return pos + (stops.trailing_zeros() / 8) as usize;
        }
        pos += 8;
    }
    naive::find_quote_or_backslash(buf, pos)
}
