//! SSE2 for every string, AVX2 for the long ones.
//!
//! Most JSON-RPC strings are short (member names, method names, 42-byte
//! addresses, 66-byte hashes), so the scan starts with inlined SSE2, which
//! every x86_64 CPU has. Once a string has run past [`AVX2_AFTER`] bytes
//! without a stop (calldata, raw transactions, blobs) the scan moves to an
//! out-of-line AVX2 loop that checks 64 bytes per iteration, if the CPU has
//! AVX2 (detected at run time and cached by `std`).
//!
//! Two kernels share the code, chosen by the `ASCII` parameter. Per 16-byte
//! vector `v`, pseudo-code:
//!
//! ```text
//! // find_string_stop: stop at '"', '\' and control bytes; report bytes >= 0x80
//! stops = (v == '"') | (v == '\\') | (min_u8(v, 0x1f) == v)   // last: v <= 0x1f
//! high  = movemask(v)                                          // bytes >= 0x80
//! // find_ascii_stop: also stop at bytes >= 0x80, with one signed compare
//! stops = (v == '"') | (v == '\\') | (v <_signed 0x20)         // 0x80..=0xff are negative
//!
//! mask = movemask(stops)           // one bit per byte
//! if mask != 0: at = trailing_zeros(mask); non_ascii |= high below `at`
//! ```
//!
//! The last partial vector is loaded overlapping the previous one (ending at
//! the last byte of the input) and the lanes already seen are shifted out, so
//! no load ever reads outside the slice.
//!
//! Free text (strings with escapes every few words, non-ASCII characters)
//! has its own AVX2 loop, [`scan_text_avx2`], which classifies 32 bytes at
//! a time and takes every escape of a block from the block's masks, where
//! the stop kernels would start again after each escape.

use core::arch::x86_64::*;

use super::{Stop, naive};
use crate::error::{Error, ErrorKind};
use crate::scan::number_run::{NumberClasses, run_last_comma};
use crate::scan::{ScannedStr, scan_escape, scan_text_portable, validate_utf8};

/// Bytes of one string scanned with SSE2 before switching to AVX2: five
/// vectors, so that a 66-byte hash's closing quote is found in the fifth
/// rather than by a call into the AVX2 loop for its last bytes (at 64,
/// one eth singles corpus cost 1.6% more instructions).
const AVX2_AFTER: usize = 80;

#[inline]
pub(crate) fn avx2_available() -> bool {
    #[cfg(fuzzing)]
    if super::runtime_simd_off() {
        return false;
    }
    std::is_x86_feature_detected!("avx2")
}

#[inline(always)]
pub(crate) fn find_string_stop(buf: &[u8], start: usize) -> Stop {
    sse2::<false, true>(buf, start)
}

#[inline(always)]
pub(crate) fn find_ascii_stop(buf: &[u8], start: usize) -> usize {
    sse2::<true, true>(buf, start).at
}

/// Bytes of one string the trusted walk scans with SSE2 before switching
/// to AVX2 (a multiple of 64 past the first 16).
const TRUSTED_AVX2_AFTER: usize = 16 + 4 * 64;

/// The first `"` or `\` at or after `start`, or `buf.len()`: the kernel of
/// the walks over text the scanner already validated, where control and
/// non-ASCII bytes need no attention. The first 16 bytes (member names)
/// are one vector; then 64 bytes a step, four vectors and one branch, so
/// that a 42-byte address or a 66-byte hash is one more step, not three or
/// four (and no call into the AVX2 loop, which waits for long data).
#[inline(always)]
pub(crate) fn find_quote_or_backslash(buf: &[u8], start: usize) -> usize {
    let len = buf.len();
    let ptr = buf.as_ptr();
    let mut pos = start;
    if pos + 16 <= len {
        // SAFETY: `pos + 16 <= len`: the 16 bytes read are inside `buf`.
        let mask = quote_or_backslash_mask(unsafe { _mm_loadu_si128(ptr.add(pos).cast()) });
        if mask != 0 {
            return pos + mask.trailing_zeros() as usize;
        }
        pos += 16;
        while pos + 64 <= len {
            if pos - start >= TRUSTED_AVX2_AFTER && avx2_available() {
                // SAFETY: the CPU has AVX2 (checked just above).
                return unsafe { quote_or_backslash_avx2(buf, pos) };
            }
            let [a, b, c, d] = [0, 16, 32, 48].map(|at| {
                // SAFETY: `pos + 64 <= len` and `at <= 48`: the 16 bytes read
                // are inside `buf`.
                quotes_or_backslashes(unsafe { _mm_loadu_si128(ptr.add(pos + at).cast()) })
            });
            // SAFETY: SSE2 is baseline on x86_64; registers only.
            let any =
                unsafe { _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d))) };
            if any != 0 {
                // SAFETY: as above.
                let mask = unsafe {
                    (_mm_movemask_epi8(a) as u32 as u64)
                        | (_mm_movemask_epi8(b) as u32 as u64) << 16
                        | (_mm_movemask_epi8(c) as u32 as u64) << 32
                        | (_mm_movemask_epi8(d) as u32 as u64) << 48
                };
                return pos + mask.trailing_zeros() as usize;
            }
            pos += 64;
        }
    }
    find_quote_or_backslash_tail(buf, pos)
}

/// The end of [`find_quote_or_backslash`]: 16 bytes a step, then the
/// last bytes.
#[inline(always)]
fn find_quote_or_backslash_tail(buf: &[u8], mut pos: usize) -> usize {
    let len = buf.len();
    let ptr = buf.as_ptr();
    while pos + 16 <= len {
        // SAFETY: `pos + 16 <= len`.
        let mask = quote_or_backslash_mask(unsafe { _mm_loadu_si128(ptr.add(pos).cast()) });
        if mask != 0 {
            return pos + mask.trailing_zeros() as usize;
        }
        pos += 16;
    }
    if pos == len {
        return len;
    }
    if len < 16 {
        return naive::find_quote_or_backslash(buf, pos);
    }
    // The last bytes: the last 16 of the input, the lanes before `pos`
    // shifted out (they were scanned, or precede `start`).
    let base = len - 16;
    // SAFETY: `len >= 16`, so `base..len` is inside `buf`.
    let mask =
        quote_or_backslash_mask(unsafe { _mm_loadu_si128(ptr.add(base).cast()) }) >> (pos - base);
    if mask != 0 {
        pos + mask.trailing_zeros() as usize
    } else {
        len
    }
}

/// `0xff` in each lane of `v` holding `"` or `\`.
#[inline(always)]
fn quotes_or_backslashes(v: __m128i) -> __m128i {
    // SAFETY: SSE2 is baseline on x86_64; registers only.
    unsafe {
        _mm_or_si128(
            _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)),
            _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)),
        )
    }
}

#[inline(always)]
fn quote_or_backslash_mask(v: __m128i) -> u64 {
    // SAFETY: SSE2 is baseline on x86_64; registers only.
    unsafe { _mm_movemask_epi8(quotes_or_backslashes(v)) as u32 as u64 }
}

/// [`find_quote_or_backslash`] for long data, 64 bytes a step in two
/// vectors.
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn quote_or_backslash_avx2(buf: &[u8], start: usize) -> usize {
    let ptr = buf.as_ptr();
    let mut pos = start;
    let stops = |v: __m256i| {
        _mm256_or_si256(
            _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8)),
            _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8)),
        )
    };
    while pos + 64 <= buf.len() {
        // SAFETY: `pos + 64 <= len`: both 32-byte loads are inside `buf`.
        let (a, b) = unsafe {
            (
                stops(_mm256_loadu_si256(ptr.add(pos).cast())),
                stops(_mm256_loadu_si256(ptr.add(pos + 32).cast())),
            )
        };
        let any = _mm256_or_si256(a, b);
        if _mm256_testz_si256(any, any) == 0 {
            let mask = (_mm256_movemask_epi8(a) as u32 as u64)
                | (_mm256_movemask_epi8(b) as u32 as u64) << 32;
            return pos + mask.trailing_zeros() as usize;
        }
        pos += 64;
    }
    // Fewer than 64 bytes left: the SSE2 kernel's tail loop finishes.
    find_quote_or_backslash_tail(buf, pos)
}

/// SSE2 alone, for tests of the backend.
#[cfg(test)]
pub(crate) fn find_string_stop_sse2_only(buf: &[u8], start: usize) -> Stop {
    sse2::<false, false>(buf, start)
}

#[cfg(test)]
pub(crate) fn find_ascii_stop_sse2_only(buf: &[u8], start: usize) -> usize {
    sse2::<true, false>(buf, start).at
}

/// AVX2 from the first byte, for tests of the backend.
#[cfg(test)]
pub(crate) fn find_string_stop_avx2_only(buf: &[u8], start: usize) -> Stop {
    assert!(avx2_available());
    // SAFETY: the CPU has AVX2 (asserted above).
    unsafe { avx2::<false>(buf, start, false) }
}

#[cfg(test)]
pub(crate) fn find_ascii_stop_avx2_only(buf: &[u8], start: usize) -> usize {
    assert!(avx2_available());
    // SAFETY: the CPU has AVX2 (asserted above).
    unsafe { avx2::<true>(buf, start, false).at }
}

/// Stop-byte mask and high-bit mask of one 16-byte vector (the high mask is
/// 0 for the ASCII kernel, whose stops include those bytes).
///
/// SSE2 is part of the x86_64 baseline, so these instructions exist on every
/// x86_64 CPU; the function is not marked `#[target_feature]` so that it (and
/// the scan around it) can be inlined into the parser's hot loops.
#[inline(always)]
fn masks_sse2<const ASCII: bool>(v: __m128i) -> (u64, u64) {
    // SAFETY: SSE2 is enabled for every x86_64 target (`cfg(target_feature =
    // "sse2")` is always true there), so these register-only intrinsics are
    // available.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let special = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash));
        if ASCII {
            let below_space = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
            let stops = _mm_or_si128(special, below_space);
            (_mm_movemask_epi8(stops) as u32 as u64, 0)
        } else {
            let ctrl_max = _mm_set1_epi8(0x1f);
            let is_ctrl = _mm_cmpeq_epi8(_mm_min_epu8(v, ctrl_max), v);
            let stops = _mm_or_si128(special, is_ctrl);
            (
                _mm_movemask_epi8(stops) as u32 as u64,
                _mm_movemask_epi8(v) as u32 as u64,
            )
        }
    }
}

/// Bits of `mask` below bit `at`.
#[inline(always)]
fn below(mask: u64, at: u32) -> u64 {
    mask & ((1u64 << at) - 1)
}

#[inline(always)]
fn naive_tail<const ASCII: bool>(buf: &[u8], pos: usize, high: bool) -> Stop {
    if ASCII {
        Stop {
            at: naive::find_ascii_stop(buf, pos),
            non_ascii: false,
        }
    } else {
        let tail = naive::find_string_stop(buf, pos);
        Stop {
            at: tail.at,
            non_ascii: tail.non_ascii || high,
        }
    }
}

/// SSE2 from `start`; with `AVX2_TAIL`, long strings continue in AVX2 when the
/// CPU has it.
#[inline(always)]
fn sse2<const ASCII: bool, const AVX2_TAIL: bool>(buf: &[u8], start: usize) -> Stop {
    let len = buf.len();
    let ptr = buf.as_ptr();
    let mut pos = start;
    let mut high = 0u64;
    while pos + 16 <= len {
        if AVX2_TAIL && pos - start >= AVX2_AFTER && avx2_available() {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { avx2::<ASCII>(buf, pos, high != 0) };
        }
        // SAFETY: `pos + 16 <= len`, so the 16 bytes read are inside `buf`;
        // `loadu` has no alignment requirement.
        let v = unsafe { _mm_loadu_si128(ptr.add(pos).cast()) };
        let (mask, h) = masks_sse2::<ASCII>(v);
        if mask != 0 {
            let at = mask.trailing_zeros();
            high |= below(h, at);
            return Stop {
                at: pos + at as usize,
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
        return naive_tail::<ASCII>(buf, pos, high != 0);
    }
    // Fewer than 16 bytes left: load the last 16 bytes of the input and drop
    // the lanes before `pos`, which were already scanned (or precede `start`).
    let base = len - 16;
    let seen = (pos - base) as u32;
    // SAFETY: `len >= 16`, so `base..len` is inside `buf`.
    let v = unsafe { _mm_loadu_si128(ptr.add(base).cast()) };
    let (mask, h) = masks_sse2::<ASCII>(v);
    let (mask, h) = (mask >> seen, h >> seen);
    if mask != 0 {
        let at = mask.trailing_zeros();
        high |= below(h, at);
        return Stop {
            at: pos + at as usize,
            non_ascii: high != 0,
        };
    }
    Stop {
        at: len,
        non_ascii: high != 0 || h != 0,
    }
}

#[inline]
#[target_feature(enable = "avx2")]
fn stops_avx2<const ASCII: bool>(v: __m256i) -> __m256i {
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    let special = _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash));
    if ASCII {
        // Signed: bytes >= 0x80 are negative, so below 0x20 too.
        _mm256_or_si256(special, _mm256_cmpgt_epi8(_mm256_set1_epi8(0x20), v))
    } else {
        let ctrl_max = _mm256_set1_epi8(0x1f);
        _mm256_or_si256(special, _mm256_cmpeq_epi8(_mm256_min_epu8(v, ctrl_max), v))
    }
}

/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn avx2<const ASCII: bool>(buf: &[u8], start: usize, mut non_ascii: bool) -> Stop {
    let len = buf.len();
    let ptr = buf.as_ptr();
    let mut pos = start;
    // Non-ASCII bytes are rare and only matter once, so they are OR-ed into a
    // vector and reduced once at the end instead of per iteration.
    let mut high = _mm256_setzero_si256();
    while pos + 64 <= len {
        // SAFETY: `pos + 64 <= len`: both 32-byte loads are inside `buf`.
        let (a, b) = unsafe {
            (
                _mm256_loadu_si256(ptr.add(pos).cast()),
                _mm256_loadu_si256(ptr.add(pos + 32).cast()),
            )
        };
        let (sa, sb) = (stops_avx2::<ASCII>(a), stops_avx2::<ASCII>(b));
        let any = _mm256_or_si256(sa, sb);
        if _mm256_testz_si256(any, any) == 0 {
            let mask = (_mm256_movemask_epi8(sa) as u32 as u64)
                | ((_mm256_movemask_epi8(sb) as u32 as u64) << 32);
            let at = mask.trailing_zeros();
            if !ASCII {
                let h = (_mm256_movemask_epi8(a) as u32 as u64)
                    | ((_mm256_movemask_epi8(b) as u32 as u64) << 32);
                non_ascii |= below(h, at) != 0 || _mm256_movemask_epi8(high) != 0;
            }
            return Stop {
                at: pos + at as usize,
                non_ascii,
            };
        }
        if !ASCII {
            high = _mm256_or_si256(high, _mm256_or_si256(a, b));
        }
        pos += 64;
    }
    if !ASCII {
        non_ascii |= _mm256_movemask_epi8(high) != 0;
    }
    while pos + 32 <= len {
        // SAFETY: `pos + 32 <= len`.
        let v = unsafe { _mm256_loadu_si256(ptr.add(pos).cast()) };
        let mask = _mm256_movemask_epi8(stops_avx2::<ASCII>(v)) as u32 as u64;
        let h = if ASCII {
            0
        } else {
            _mm256_movemask_epi8(v) as u32 as u64
        };
        if mask != 0 {
            let at = mask.trailing_zeros();
            non_ascii |= below(h, at) != 0;
            return Stop {
                at: pos + at as usize,
                non_ascii,
            };
        }
        non_ascii |= h != 0;
        pos += 32;
    }
    if pos == len {
        return Stop { at: len, non_ascii };
    }
    if len < 32 {
        return naive_tail::<ASCII>(buf, pos, non_ascii);
    }
    let base = len - 32;
    let seen = (pos - base) as u32;
    // SAFETY: `len >= 32`, so `base..len` is inside `buf`.
    let v = unsafe { _mm256_loadu_si256(ptr.add(base).cast()) };
    let mask = (_mm256_movemask_epi8(stops_avx2::<ASCII>(v)) as u32 as u64) >> seen;
    let h = if ASCII {
        0
    } else {
        (_mm256_movemask_epi8(v) as u32 as u64) >> seen
    };
    if mask != 0 {
        let at = mask.trailing_zeros();
        non_ascii |= below(h, at) != 0;
        return Stop {
            at: pos + at as usize,
            non_ascii,
        };
    }
    Stop {
        at: len,
        non_ascii: non_ascii || h != 0,
    }
}

/// [`crate::scan::scan_text`] in 32-byte blocks, each loaded once and
/// classified into masks (quotes, backslashes, control bytes, bytes >=
/// 0x80). A block with backslashes is decided from the masks alone up to
/// the first backslash that is doubled, in the last lane, or not followed
/// by a two-byte escape or `u` and four hex digits in the block: before
/// it, each backslash escapes the next byte and the closing quote is the
/// first quote not escaped. The block is taken up to there (the next one
/// starts at that backslash) or, when that backslash is its first byte,
/// stop by stop: each escape checked where the stop mask puts it and the
/// mask's bits up to its end cleared, as a block without backslashes is.
/// The last bytes of the input (fewer than 32) are finished by the portable
/// loop.
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scan_text_avx2(
    buf: &[u8],
    from: usize,
    mut pos: usize,
    mut escaped: bool,
    mut non_ascii: bool,
) -> Result<ScannedStr, Error> {
    let ptr = buf.as_ptr();
    // UTF-8 is checked block by block as the string is classified, when
    // everything before `pos` is known to be ASCII (every caller's case):
    // a string's bytes are then read once, where a check after its end
    // read them again through a call (a tenth of an MCP message's parse).
    // Otherwise, or when the check fails (to find where and why), the
    // content is validated once the string ends, as before.
    let mut utf8 = Utf8Blocks::new(!non_ascii);
    while pos + 32 <= buf.len() {
        // SAFETY: `pos + 32 <= buf.len()`: the 32 bytes read are inside `buf`.
        let v = unsafe { _mm256_loadu_si256(ptr.add(pos).cast()) };
        let quote = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8));
        let backslash = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8));
        let control = _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1f)), v);
        let mut stops =
            _mm256_movemask_epi8(_mm256_or_si256(_mm256_or_si256(quote, backslash), control))
                as u32;
        let high = _mm256_movemask_epi8(v) as u32;
        let backslashes = _mm256_movemask_epi8(backslash) as u32;
        // Free text's common case, decided from the masks: every escape
        // in the block is checked at once, up to the first one the masks
        // cannot vouch for (a backslash escaping another, an escape cut by
        // the block's end, a bad one): the block is taken up to there and
        // the next starts at that backslash. (Taken whole or not at all,
        // text dense with `\u` escapes, as Python's `json.dumps` writes,
        // went stop by stop in most blocks: one escape in six bytes puts a
        // `\u` across nearly every block's end.)
        if backslashes != 0 {
            // Lanes `k` where `k` and `k + 1` are both backslashes.
            let doubled = backslashes & backslashes >> 1;
            // The escaped lanes (`k + 1` for a backslash at `k`) that are
            // not a two-byte escape or a `\u` with four hex digits here.
            let mut unusual = backslashes << 1 & !simple_escapes(v);
            if unusual != 0 {
                let hex = hex_digits(v);
                let four_hex_after = hex >> 1 & hex >> 2 & hex >> 3 & hex >> 4;
                let u = _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'u' as i8)));
                unusual &= !(u as u32 & four_hex_after);
            }
            // A backslash in the last lane escapes the next block's first.
            let limit = (doubled | unusual >> 1 | backslashes & 1 << 31).trailing_zeros();
            // Before `limit` every backslash is a single, good escape:
            // the quotes after them are content.
            let closing =
                (_mm256_movemask_epi8(quote) as u32 & !(backslashes << 1)).trailing_zeros();
            let end = closing.min(limit);
            let inside = ((1u64 << end) - 1) as u32;
            let controls = _mm256_movemask_epi8(control) as u32;
            // (A block that starts at such a backslash goes stop by stop
            // below, as does one with a control byte before `end`.)
            if controls & inside == 0 && limit > 0 {
                escaped |= backslashes & inside != 0;
                non_ascii |= high & inside != 0;
                utf8.block(v, high & inside, end);
                if closing < limit {
                    let at = pos + closing as usize;
                    if non_ascii && !utf8.valid() {
                        validate_utf8(buf, from, at)?;
                    }
                    return Ok(ScannedStr {
                        end: at + 1,
                        escaped,
                    });
                }
                if limit < 32 {
                    // The block's content ended at a backslash (ASCII):
                    // a sequence cut there was refused in this block.
                    utf8.after_ascii();
                }
                pos += limit as usize;
                continue;
            }
        }
        loop {
            if stops == 0 {
                // The whole block is content.
                non_ascii |= high != 0;
                utf8.block(v, high, 32);
                pos += 32;
                break;
            }
            let lane = stops.trailing_zeros();
            let at = pos + lane as usize;
            non_ascii |= high & ((1u32 << lane) - 1) != 0;
            let escape = match buf[at] {
                b'\\' => scan_escape(buf, at),
                b'"' => {
                    utf8.block(v, high & ((1u32 << lane) - 1), lane);
                    if non_ascii && !utf8.valid() {
                        validate_utf8(buf, from, at)?;
                    }
                    return Ok(ScannedStr {
                        end: at + 1,
                        escaped,
                    });
                }
                _ => Err(Error::new(ErrorKind::ControlCharacter, at)),
            };
            let after = match escape {
                Ok(after) => after,
                Err(e) => {
                    // An earlier invalid UTF-8 sequence comes first.
                    if non_ascii {
                        validate_utf8(buf, from, at)?;
                    }
                    return Err(e);
                }
            };
            escaped = true;
            let taken = after - pos;
            if taken >= 32 {
                // A `\uXXXX` running past the block: the rest of the block
                // is the escape (ASCII); go on from its end, after ASCII.
                utf8.block(v, high, 32);
                utf8.after_ascii();
                pos = after;
                break;
            }
            stops &= !0u32 << taken;
        }
    }
    scan_text_portable(buf, from, pos, escaped, non_ascii)
}

/// UTF-8 validation of a string's content 32 bytes at a time, with three
/// nibble lookups per block (the method of Keiser and Lemire, "Validating
/// UTF-8 in less than one instruction per byte", 2021): a byte and the
/// one before it index tables whose bits name the errors each allows
/// (an overlong form, a surrogate, a code point past U+10FFFF, a lead
/// without its continuations, a stray continuation); a bit left in all
/// three is an error. Continuations two and three bytes after a lead are
/// checked apart, from the bytes two and three back.
///
/// Blocks are given in order; bytes past the content are zeroed, so a
/// sequence cut by the string's end is an error (a lead followed by 0).
struct Utf8Blocks {
    /// Whether every byte before the first block is ASCII; if not, the
    /// caller checks the whole content itself.
    usable: bool,
    /// The previous block's bytes (zero: ASCII).
    prev: __m256i,
    /// Whether `prev` held a byte >= 0x80 (else the next block's check
    /// can be skipped when it holds none either).
    prev_high: bool,
    /// Error bits gathered from every block.
    error: __m256i,
}

// Error bits of the lookups (two errors that never share a lead share bit 6).
const TOO_SHORT: u8 = 1 << 0; // a lead, then no continuation
const TOO_LONG: u8 = 1 << 1; // ASCII, then a continuation
const OVERLONG_3: u8 = 1 << 2; // E0 80..9F
const TOO_LARGE: u8 = 1 << 3; // F4 90..BF, F5..FF 90..BF
const SURROGATE: u8 = 1 << 4; // ED A0..BF
const OVERLONG_2: u8 = 1 << 5; // C0 or C1, then a continuation
const TOO_LARGE_1000: u8 = 1 << 6; // F5..FF 80..8F
const OVERLONG_4: u8 = 1 << 6; // F0 80..8F
const TWO_CONTS: u8 = 1 << 7; // a continuation after a continuation
/// The errors that any byte before the pair allows.
const CARRY: u8 = TOO_SHORT | TOO_LONG | TWO_CONTS;

/// By the high nibble of the byte before.
const FIRST_HIGH: [u8; 16] = [
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TWO_CONTS,
    TWO_CONTS,
    TWO_CONTS,
    TWO_CONTS,
    TOO_SHORT | OVERLONG_2,
    TOO_SHORT,
    TOO_SHORT | OVERLONG_3 | SURROGATE,
    TOO_SHORT | TOO_LARGE | TOO_LARGE_1000 | OVERLONG_4,
];

/// By the low nibble of the byte before.
const FIRST_LOW: [u8; 16] = [
    CARRY | OVERLONG_3 | OVERLONG_2 | OVERLONG_4,
    CARRY | OVERLONG_2,
    CARRY,
    CARRY,
    CARRY | TOO_LARGE,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000 | SURROGATE,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
    CARRY | TOO_LARGE | TOO_LARGE_1000,
];

/// By the high nibble of the byte itself.
const SECOND_HIGH: [u8; 16] = [
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE_1000 | OVERLONG_4,
    TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE,
    TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE,
    TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
];

/// 32 lanes of `0xff` then 32 of zero: loaded from `32 - n`, the mask of
/// the first `n` lanes.
static FIRST_LANES: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 32 {
        t[i] = 0xff;
        i += 1;
    }
    t
};

impl Utf8Blocks {
    #[inline]
    #[target_feature(enable = "avx2")]
    fn new(usable: bool) -> Self {
        Utf8Blocks {
            usable,
            prev: _mm256_setzero_si256(),
            prev_high: false,
            error: _mm256_setzero_si256(),
        }
    }

    /// The next block: its first `content` lanes (at most 32) are the
    /// string's; `high` has a bit for each of those that is >= 0x80.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn block(&mut self, v: __m256i, high: u32, content: u32) {
        if high == 0 && !self.prev_high {
            self.prev = _mm256_setzero_si256();
            return;
        }
        debug_assert!(content <= 32);
        let content = content.min(32) as usize;
        // SAFETY: the 32 bytes from `32 - content` (0 to 32) are within
        // `FIRST_LANES`' 64.
        let keep = unsafe { _mm256_loadu_si256(FIRST_LANES.as_ptr().add(32 - content).cast()) };
        let cur = _mm256_and_si256(v, keep);
        self.error = _mm256_or_si256(self.error, utf8_errors(self.prev, cur));
        self.prev = cur;
        self.prev_high = high != 0;
    }

    /// The next block follows bytes that are ASCII: the rest of an
    /// escape that ran past the last block. (That block ended inside the
    /// escape, so no sequence stays open: it was checked whole.)
    #[inline]
    #[target_feature(enable = "avx2")]
    fn after_ascii(&mut self) {
        self.prev = _mm256_setzero_si256();
        self.prev_high = false;
    }

    /// Whether everything given was valid UTF-8 (after the last block,
    /// whose bytes past the content were zeroed).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn valid(&self) -> bool {
        self.usable && _mm256_testz_si256(self.error, self.error) == 1
    }
}

/// The error bits of block `cur`, whose bytes follow those of `prev`.
#[inline]
#[target_feature(enable = "avx2")]
fn utf8_errors(prev: __m256i, cur: __m256i) -> __m256i {
    // SAFETY: each table holds 16 bytes.
    let table =
        |t: &[u8; 16]| unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())) };
    let low_nibbles = _mm256_set1_epi8(0x0f);
    let high_nibble = |x: __m256i| _mm256_and_si256(_mm256_srli_epi16::<4>(x), low_nibbles);
    // The 32 bytes before `cur`'s lanes, shifted in from `prev`: the last
    // 16 of `prev` and the first 16 of `cur`.
    let seam = _mm256_permute2x128_si256::<0x21>(prev, cur);
    let before1 = _mm256_alignr_epi8::<15>(cur, seam);
    let before2 = _mm256_alignr_epi8::<14>(cur, seam);
    let before3 = _mm256_alignr_epi8::<13>(cur, seam);
    let pairs = _mm256_and_si256(
        _mm256_and_si256(
            _mm256_shuffle_epi8(table(&FIRST_HIGH), high_nibble(before1)),
            _mm256_shuffle_epi8(table(&FIRST_LOW), _mm256_and_si256(before1, low_nibbles)),
        ),
        _mm256_shuffle_epi8(table(&SECOND_HIGH), high_nibble(cur)),
    );
    // Lanes two after a three- or four-byte lead (>= 0xE0), or three
    // after a four-byte lead (>= 0xF0), must be continuations: their top
    // bit, against `TWO_CONTS` (a continuation after one), which is an
    // error exactly where it is not required.
    let third = _mm256_subs_epu8(before2, _mm256_set1_epi8((0xe0u8 - 0x80) as i8));
    let fourth = _mm256_subs_epu8(before3, _mm256_set1_epi8((0xf0u8 - 0x80) as i8));
    let required = _mm256_and_si256(
        _mm256_or_si256(third, fourth),
        _mm256_set1_epi8(0x80u8 as i8),
    );
    _mm256_xor_si256(required, pairs)
}

/// The lanes of `v` holding a byte that may follow a backslash as a
/// two-byte escape: `"`, `\\`, `/`, `b`, `f`, `n`, `r`, `t`.
#[inline]
#[target_feature(enable = "avx2")]
fn simple_escapes(v: __m256i) -> u32 {
    let is = |b: u8| _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b as i8));
    let any = _mm256_or_si256(
        _mm256_or_si256(
            _mm256_or_si256(is(b'"'), is(b'\\')),
            _mm256_or_si256(is(b'/'), is(b'b')),
        ),
        _mm256_or_si256(
            _mm256_or_si256(is(b'f'), is(b'n')),
            _mm256_or_si256(is(b'r'), is(b't')),
        ),
    );
    _mm256_movemask_epi8(any) as u32
}

/// The lanes of `v` holding an ASCII hex digit.
#[inline]
#[target_feature(enable = "avx2")]
fn hex_digits(v: __m256i) -> u32 {
    // Signed compares: bytes >= 0x80 are negative, below every bound.
    let within = |x: __m256i, lo: u8, hi: u8| {
        _mm256_and_si256(
            _mm256_cmpgt_epi8(x, _mm256_set1_epi8(lo as i8 - 1)),
            _mm256_cmpgt_epi8(_mm256_set1_epi8(hi as i8 + 1), x),
        )
    };
    let lower = _mm256_or_si256(v, _mm256_set1_epi8(0x20));
    _mm256_movemask_epi8(_mm256_or_si256(
        within(v, b'0', b'9'),
        within(lower, b'a', b'f'),
    )) as u32
}

/// The six classes of a 64-byte window of a run of numbers
/// ([`NumberClasses`]), from two 32-byte vectors.
#[inline]
#[target_feature(enable = "avx2")]
fn number_classes_avx2(window: &[u8; 64]) -> NumberClasses {
    let ptr = window.as_ptr();
    // SAFETY: `window` is 64 bytes: both 32-byte loads are inside it.
    let (lo, hi) = unsafe {
        (
            _mm256_loadu_si256(ptr.cast()),
            _mm256_loadu_si256(ptr.add(32).cast()),
        )
    };
    let bits = |lo: __m256i, hi: __m256i| {
        (_mm256_movemask_epi8(lo) as u32 as u64) | (_mm256_movemask_epi8(hi) as u32 as u64) << 32
    };
    let is = |byte: u8| {
        let b = _mm256_set1_epi8(byte as i8);
        bits(_mm256_cmpeq_epi8(lo, b), _mm256_cmpeq_epi8(hi, b))
    };
    // Digits with two signed compares: bytes >= 0x80 are negative, so
    // never above `'0' - 1`.
    let digits = |v: __m256i| {
        _mm256_and_si256(
            _mm256_cmpgt_epi8(v, _mm256_set1_epi8(b'0' as i8 - 1)),
            _mm256_cmpgt_epi8(_mm256_set1_epi8(b'9' as i8 + 1), v),
        )
    };
    NumberClasses {
        digit: bits(digits(lo), digits(hi)),
        zero: is(b'0'),
        minus: is(b'-'),
        dot: is(b'.'),
        comma: is(b','),
        space: is(b' '),
    }
}

/// [`run_last_comma`] with AVX2 classes.
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn number_run_avx2(buf: &[u8], start: usize) -> Option<usize> {
    run_last_comma(buf, start, |window| number_classes_avx2(window))
}

#[cfg(test)]
mod number_tests {
    use super::*;

    #[test]
    fn avx2_classes_are_the_bytes_classes() {
        if !avx2_available() {
            return;
        }
        // Every byte value at every position, among digits and separators.
        let base: [u8; 64] = *b"-0.5,12,0,-3.25, 7.0,100,-0,8.125,0.0,4,-6.5,33,2.5,9,1.75,6,xx]";
        for at in 0..64 {
            for byte in 0..=255u8 {
                let mut w = base;
                w[at] = byte;
                // SAFETY: the CPU has AVX2 (checked above).
                let got = unsafe { number_classes_avx2(&w) };
                assert_eq!(got, NumberClasses::of(&w), "byte {byte:#x} at {at}");
            }
        }
    }
}
