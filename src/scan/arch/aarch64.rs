//! NEON, part of the aarch64 baseline: 16 bytes per step.
//!
//! NEON has no `movemask`; the usual replacement narrows each 16-bit pair of
//! comparison bytes by a 4-bit shift (`shrn`), leaving a 64-bit mask with four
//! bits per input byte. The first stop is then `trailing_zeros / 4`.
//!
//! ```text
//! stops = (v == '"') | (v == '\\') | (v < 0x20)
//! mask  = shrn(stops as u16x8, 4) as u64        // 4 bits per byte
//! high  = shrn((v >= 0x80) as u16x8, 4) as u64
//! ```

use core::arch::aarch64::*;

use super::{Stop, naive};

// This module is built only with `target_feature = "neon"` (the aarch64
// baseline; a build that turns it off takes the portable backend), so these
// intrinsics exist on every CPU the build runs on. The
// helpers are not `#[target_feature]` functions so that they inline into the
// parser's loops.

#[inline(always)]
fn nibble_mask(v: uint8x16_t) -> u64 {
    // SAFETY: NEON is baseline on aarch64 (see above); registers only.
    unsafe {
        vget_lane_u64::<0>(vreinterpret_u64_u8(vshrn_n_u16::<4>(vreinterpretq_u16_u8(
            v,
        ))))
    }
}

#[inline(always)]
fn stops(v: uint8x16_t) -> uint8x16_t {
    // SAFETY: NEON is baseline on aarch64 (see above); registers only.
    unsafe {
        let quote = vdupq_n_u8(b'"');
        let backslash = vdupq_n_u8(b'\\');
        let space = vdupq_n_u8(0x20);
        vorrq_u8(
            vorrq_u8(vceqq_u8(v, quote), vceqq_u8(v, backslash)),
            vcltq_u8(v, space),
        )
    }
}

/// Stops of the ASCII kernel: also every byte >= 0x80 (negative as `i8`).
#[inline(always)]
fn ascii_stops(v: uint8x16_t) -> uint8x16_t {
    // SAFETY: NEON is baseline on aarch64 (see above); registers only.
    unsafe {
        let quote = vdupq_n_u8(b'"');
        let backslash = vdupq_n_u8(b'\\');
        let below = vcltq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(0x20));
        vorrq_u8(vorrq_u8(vceqq_u8(v, quote), vceqq_u8(v, backslash)), below)
    }
}

/// Quotes and backslashes only: the trusted walks' stops.
#[inline(always)]
fn quotes_or_backslashes(v: uint8x16_t) -> uint8x16_t {
    // SAFETY: NEON is baseline on aarch64 (see above); registers only.
    unsafe {
        vorrq_u8(
            vceqq_u8(v, vdupq_n_u8(b'"')),
            vceqq_u8(v, vdupq_n_u8(b'\\')),
        )
    }
}

#[inline(always)]
pub(crate) fn find_ascii_stop(buf: &[u8], start: usize) -> usize {
    first_stop(buf, start, ascii_stops, naive::find_ascii_stop)
}

#[inline(always)]
pub(crate) fn find_quote_or_backslash(buf: &[u8], start: usize) -> usize {
    first_stop(
        buf,
        start,
        quotes_or_backslashes,
        naive::find_quote_or_backslash,
    )
}

/// The first byte at or after `start` that `stops` flags, 16 bytes a step.
#[inline(always)]
fn first_stop(
    buf: &[u8],
    start: usize,
    stops: impl Fn(uint8x16_t) -> uint8x16_t,
    tail: fn(&[u8], usize) -> usize,
) -> usize {
    let len = buf.len();
    let ptr = buf.as_ptr();
    let mut pos = start;
    while pos + 16 <= len {
        // SAFETY: `pos + 16 <= len`, so the 16 bytes read are inside `buf`.
        let v = unsafe { vld1q_u8(ptr.add(pos)) };
        let mask = nibble_mask(stops(v));
        if mask != 0 {
            return pos + (mask.trailing_zeros() / 4) as usize;
        }
        pos += 16;
    }
    if pos == len {
        return len;
    }
    if len < 16 {
        return tail(buf, pos);
    }
    let base = len - 16;
    let seen = (pos - base) as u32 * 4;
    // SAFETY: `len >= 16`, so `base..len` is inside `buf`.
    let v = unsafe { vld1q_u8(ptr.add(base)) };
    let mask = nibble_mask(stops(v)) >> seen;
    if mask != 0 {
        pos + (mask.trailing_zeros() / 4) as usize
    } else {
        len
    }
}

#[inline(always)]
fn high_bytes(v: uint8x16_t) -> uint8x16_t {
    // SAFETY: NEON is baseline on aarch64 (see above); registers only.
    unsafe { vcgeq_u8(v, vdupq_n_u8(0x80)) }
}

/// Nibble-mask bits below byte lane `lane`.
#[inline(always)]
fn below(mask: u64, lane: u32) -> u64 {
    if lane >= 16 {
        mask
    } else {
        mask & ((1u64 << (lane * 4)) - 1)
    }
}

#[inline(always)]
pub(crate) fn find_string_stop(buf: &[u8], start: usize) -> Stop {
    let len = buf.len();
    let ptr = buf.as_ptr();
    let mut pos = start;
    let mut high = 0u64;
    while pos + 16 <= len {
        // SAFETY: `pos + 16 <= len`, so the 16 bytes read are inside `buf`;
        // `vld1q_u8` has no alignment requirement.
        let v = unsafe { vld1q_u8(ptr.add(pos)) };
        let mask = nibble_mask(stops(v));
        let h = nibble_mask(high_bytes(v));
        if mask != 0 {
            let lane = mask.trailing_zeros() / 4;
            high |= below(h, lane);
            return Stop {
                at: pos + lane as usize,
                non_ascii: high != 0,
            };
        }
        high |= h;
        pos += 16;
    }
    if pos == len {
        return Stop {
            at: len,
            non_ascii: high != 0,
        };
    }
    if len < 16 {
        let tail = naive::find_string_stop(buf, pos);
        return Stop {
            at: tail.at,
            non_ascii: tail.non_ascii || high != 0,
        };
    }
    // The last 16 bytes of the input, with the lanes before `pos` shifted out.
    let base = len - 16;
    let seen = (pos - base) as u32 * 4;
    // SAFETY: `len >= 16`, so `base..len` is inside `buf`.
    let v = unsafe { vld1q_u8(ptr.add(base)) };
    let mask = nibble_mask(stops(v)) >> seen;
    let h = nibble_mask(high_bytes(v)) >> seen;
    if mask != 0 {
        let lane = mask.trailing_zeros() / 4;
        high |= below(h, lane);
        return Stop {
            at: pos + lane as usize,
            non_ascii: high != 0,
        };
    }
    Stop {
        at: len,
        non_ascii: high != 0 || h != 0,
    }
}
