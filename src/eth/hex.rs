//! Hex text, both ways: the QUANTITY and DATA grammars over a string's
//! content (no quotes), and the writers' encoders.
//!
//! Which code does the work (measured by the `hex` group of
//! `benches/eth_decode.rs`, on 20,000 distinct values each):
//!
//! * QUANTITY (at most 64 digits, nearly always at most 16): eight digits
//!   at a time in a `u64` (SWAR: classified, checked and folded without a
//!   loop over the digits), into 64-bit limbs. For these short strings it
//!   beats padding the digits to an even count and handing them to
//!   const-hex, which must first copy them into a buffer.
//! * DATA of 32 to 64 digits (addresses, hashes) on x86_64 with AVX2: the
//!   AVX2 decoder below, two vectors (overlapping for an address); on a
//!   hash about a third of the SSE2 decoder's instructions (callgrind, an
//!   `eth_getLogs` filter: 3,115 -> 2,878 in all).
//! * DATA of 16 to 64 digits otherwise on x86_64: an inlined SSE2 decoder
//!   (16 digits per vector, checked and decoded together), which costs a
//!   quarter of const-hex's instructions on an address (callgrind, one
//!   `eth_getBalance` decode: 335 -> 251 in all).
//! * Longer DATA into the arena on x86_64 with AVX2 (calldata, signed
//!   transactions): an AVX2 decoder writing into the arena's fresh bytes,
//!   checked and decoded in one pass without zeroing them first. On
//!   `eth_sendRawTransaction` params (the `ETH_RATIOS` run) the ratio to
//!   serde_json went from 2.24-2.40x to 3.08-3.23x with this and the last
//!   element's fused end (`EthParams::next_bytes_in`); the zeroing alone
//!   was about a quarter of the instructions.
//! * Other long DATA, and all of it elsewhere: const-hex (SSSE3/AVX2 on
//!   x86_64, NEON on aarch64, chosen at run time), which checks and decodes
//!   in one pass.
//! * Encoding: const-hex, into a stack buffer.

use super::decode::Reason;

/// Each byte's hex value, or `0x80` for a byte that is not a hex digit.
static HEX_VALUE: [u8; 256] = {
    let mut t = [0x80u8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// The digits of a QUANTITY (`^0[xX](0|[1-9a-fA-F][0-9a-fA-F]*)$`),
/// after checking the prefix and the leading digit; the digits themselves
/// are checked as they are folded. As geth's hexutil reads a QUANTITY:
/// `0X` is a prefix too, and an empty string is zero (block numbers,
/// which geth reads otherwise, refuse it before they get here).
#[inline(always)]
pub(crate) fn quantity_digits(s: &[u8]) -> Result<&[u8], Reason> {
    match s {
        [b'0', b'x' | b'X', digits @ ..] => match digits {
            [] => Err(Reason::EmptyQuantity),
            [b'0', _, ..] => Err(Reason::LeadingZeros),
            _ => Ok(digits),
        },
        [] => Ok(&[]),
        _ => Err(Reason::MissingPrefix),
    }
}

/// Folds up to 16 hex digits into a `u64`, eight at a time in a `u64`
/// (SWAR): as many instructions as a table lookup per digit on the usual
/// 2 to 8 digits, but no loop whose exit depends on the count (callgrind
/// on `eth_call` params: 3.5 fewer mispredicted branches per decode, the
/// ratio to serde_json 2.93x -> 3.10x).
#[inline(always)]
fn fold(digits: &[u8]) -> Result<u64, Reason> {
    debug_assert!(digits.len() <= 16);
    let n = digits.len();
    let (value, ok) = if n <= 8 {
        fold8(load_right_aligned(digits))
    } else {
        let (high, high_ok) = fold8(load_right_aligned(&digits[..n - 8]));
        let low = u64::from_be_bytes(digits[n - 8..].try_into().unwrap());
        let (low, low_ok) = fold8(low);
        (high << 32 | low, high_ok & low_ok)
    };
    if ok {
        Ok(value)
    } else {
        Err(Reason::InvalidDigit)
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = ONES * 0x80;

/// Up to eight bytes as a big-endian `u64`, right-aligned, the bytes
/// before them `'0'` (a leading zero digit, which adds nothing): two
/// overlapping 4-byte loads, or three single bytes for fewer than four.
#[inline(always)]
fn load_right_aligned(d: &[u8]) -> u64 {
    let n = d.len();
    debug_assert!(n <= 8);
    let word = if n >= 4 {
        let first = u32::from_be_bytes(d[..4].try_into().unwrap()) as u64;
        let last = u32::from_be_bytes(d[n - 4..].try_into().unwrap()) as u64;
        // The two loads overlap on the same bytes: OR keeps them.
        first << (8 * (n - 4)) | last
    } else if n > 0 {
        (d[0] as u64) << (8 * (n - 1))
            | (d[n / 2] as u64) << (8 * (n - 1 - n / 2))
            | d[n - 1] as u64
    } else {
        0
    };
    let digits_mask = u64::MAX.checked_shr(64 - 8 * n as u32).unwrap_or(0);
    word | ((ONES * b'0' as u64) & !digits_mask)
}

/// Eight ASCII hex digits, the first in the most significant byte: their
/// value (32 bits), and whether all eight are hex digits.
#[inline(always)]
fn fold8(w: u64) -> (u64, bool) {
    // Per byte `x` below 0x80: the high bit of `(x | 0x80) - c` is set
    // exactly when `x >= c` (no borrow crosses bytes).
    let at_least = |x: u64, c: u8| ((x | HIGH_BITS) - ONES * c as u64) & HIGH_BITS;
    let lower = w | (ONES * 0x20);
    let digit = at_least(w, b'0') & !at_least(w, b'9' + 1);
    let letter = at_least(lower, b'a') & !at_least(lower, b'f' + 1);
    let ok = w & HIGH_BITS == 0 && digit | letter == HIGH_BITS;
    // A digit's value is its low nibble; a letter's (bit 6 set) nine more.
    let v = (w & (ONES * 0x0f)) + ((w >> 6) & ONES) * 9;
    // Pairs of nibbles into bytes, bytes into 16 bits, into 32.
    let v = (v | v >> 4) & 0x00ff_00ff_00ff_00ff;
    let v = (v | v >> 8) & 0x0000_ffff_0000_ffff;
    ((v | v >> 16) & 0xffff_ffff, ok)
}

/// A QUANTITY of at most `L` 64-bit limbs, little-endian limbs.
#[inline(always)]
pub(crate) fn quantity_limbs<const L: usize>(s: &[u8]) -> Result<[u64; L], Reason> {
    limbs(quantity_digits(s)?)
}

/// A storage key (`eth_getStorageAt`'s slot): `0x` and up to 64 hex
/// digits, leading zeros allowed, as geth and reth read it (clients send
/// both the QUANTITY form, `0x0`, and the 32-byte DATA form, `0x00…00`;
/// `0x` alone is slot 0, as geth, alloy and the spec's `bytesMax32` have
/// it; `0X` and an empty string as geth's `decodeHash` reads them). Digits
/// without a prefix are refused: geth's `decodeHash` reads `"10"` as hex
/// (slot 16), reth's `JsonStorageKey` as decimal (slot 10), and the spec
/// requires the prefix; a guess would read the wrong slot on one of them.
#[inline]
pub(crate) fn storage_key_limbs(s: &[u8]) -> Result<[u64; 4], Reason> {
    match s {
        [b'0', b'x' | b'X', digits @ ..] if digits.len() > 64 => {
            if digits.iter().any(|&d| HEX_VALUE[d as usize] & 0x80 != 0) {
                return Err(Reason::InvalidDigit);
            }
            Err(Reason::KeyTooLong)
        }
        [b'0', b'x' | b'X', digits @ ..] => limbs(digits),
        [] => Ok([0; 4]),
        _ => Err(Reason::MissingPrefix),
    }
}

/// A transaction's `type`: the spec's `byte` (`0x` and up to two hex
/// digits, leading zero allowed: `0x02`; `0x` alone is 0, as the spec's
/// pattern and alloy have it), or a QUANTITY.
#[inline]
pub(crate) fn type_byte(s: &[u8]) -> Result<u64, Reason> {
    match s {
        [b'0', b'x' | b'X', digits @ ..] if digits.len() <= 2 => limbs::<1>(digits).map(|[b]| b),
        _ => quantity_u64(s),
    }
}

/// Hex digits folded into `L` 64-bit limbs, little-endian limbs.
#[inline(always)]
fn limbs<const L: usize>(digits: &[u8]) -> Result<[u64; L], Reason> {
    if digits.len() > 16 * L {
        // Tell "not hex" from "too large": the digits decide.
        if digits.iter().any(|&d| HEX_VALUE[d as usize] & 0x80 != 0) {
            return Err(Reason::InvalidDigit);
        }
        return Err(match L {
            1 => Reason::Overflow64,
            2 => Reason::Overflow128,
            _ => Reason::Overflow256,
        });
    }
    let mut limbs = [0u64; L];
    let mut end = digits.len();
    for limb in limbs.iter_mut() {
        if end == 0 {
            break;
        }
        let start = end.saturating_sub(16);
        *limb = fold(&digits[start..end])?;
        end = start;
    }
    Ok(limbs)
}

#[inline(always)]
pub(crate) fn quantity_u64(s: &[u8]) -> Result<u64, Reason> {
    let digits = quantity_digits(s)?;
    if digits.len() > 16 {
        return quantity_limbs::<1>(s).map(|l| l[0]);
    }
    fold(digits)
}

#[inline]
pub(crate) fn quantity_u128(s: &[u8]) -> Result<u128, Reason> {
    let [lo, hi] = quantity_limbs::<2>(s)?;
    Ok(((hi as u128) << 64) | lo as u128)
}

/// The hex digits of a DATA value, not yet checked: after `0x` or `0X`
/// (an even number), or none for the empty string, as geth's hexutil
/// reads DATA (a fixed size, an address's or a hash's, then refuses `""`
/// for its length).
#[inline(always)]
pub(crate) fn data_digits(s: &[u8]) -> Result<&[u8], Reason> {
    match s {
        [b'0', b'x' | b'X', digits @ ..] if digits.len() % 2 == 0 => Ok(digits),
        [b'0', b'x' | b'X', ..] => Err(Reason::OddLength),
        [] => Ok(&[]),
        _ => Err(Reason::MissingPrefix),
    }
}

/// Checks that `digits` are all hex digits (SIMD, through const-hex).
#[inline]
pub(crate) fn check_digits(digits: &[u8]) -> Result<(), Reason> {
    if const_hex::check_raw(digits) {
        Ok(())
    } else {
        Err(Reason::InvalidDigit)
    }
}

/// Decodes `digits` (an even number, already counted) into `out`, which
/// holds exactly half as many bytes.
#[inline]
pub(crate) fn decode_digits(digits: &[u8], out: &mut [u8]) -> Result<(), Reason> {
    // Checked in release builds too: the kernel below writes through a
    // raw pointer what `digits` holds, half its length.
    assert_eq!(
        digits.len(),
        2 * out.len(),
        "DATA digits and bytes disagree"
    );
    // const-hex strips a `0x` it finds at the front; digits never start
    // with one (`x` is not a digit), but such input must fail, not be
    // stripped: it is checked here.
    if digits.len() >= 2 && digits[1] | 0x20 == b'x' {
        return Err(Reason::InvalidDigit);
    }
    #[cfg(target_arch = "x86_64")]
    if (16..=SHORT_DIGITS).contains(&digits.len()) {
        if digits.len() >= 32 && crate::scan::arch::avx2_available() {
            // SAFETY: the CPU has AVX2 (checked just above); `digits` holds
            // at least 32 digits, and `out` the `digits.len() / 2` bytes
            // the kernel writes.
            return match unsafe { avx2::decode(digits, out.as_mut_ptr()) } {
                true => Ok(()),
                false => Err(Reason::InvalidDigit),
            };
        }
        return sse2::decode(digits, out);
    }
    const_hex::decode_to_slice(digits, out).map_err(|_| Reason::InvalidDigit)
}

/// Exactly `2 * N` digits into `N` bytes, for the fixed sizes (addresses,
/// hashes, storage keys). With AVX2 and 16 to 32 bytes, two vectors and
/// no loop: the general decoder's loop exits, taken after a different
/// count for each size a message mixes, were among the branches an
/// `eth_call` decode mispredicted most.
#[inline(always)]
pub(crate) fn decode_array<const N: usize>(digits: &[u8]) -> Result<[u8; N], Reason> {
    debug_assert_eq!(digits.len(), 2 * N);
    #[cfg(target_arch = "x86_64")]
    if (16..=32).contains(&N) && digits.len() == 2 * N && crate::scan::arch::avx2_available() {
        // SAFETY: the CPU has AVX2 (checked just above); `digits` holds
        // `2 * N` digits and `N` is within 16..=32, as the kernel needs.
        let all = unsafe { avx2::decode_array::<N>(digits) }.ok_or(Reason::InvalidDigit)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&all.0[..N]);
        return Ok(out);
    }
    let mut out = [0u8; N];
    decode_digits(digits, &mut out)?;
    Ok(out)
}

/// Up to this many digits (a hash's 64) the inlined SSE2 decoder does the
/// work; longer data goes to const-hex, whose AVX2 loop wins there.
#[cfg(target_arch = "x86_64")]
const SHORT_DIGITS: usize = 64;

/// Whether [`decode_digits_in`] checks and decodes `digits` digits in one
/// pass that stops within a few hundred bytes of the first byte that is
/// not a digit (long data on x86_64 with AVX2): only then may a caller
/// hand it more than the value (everything up to the params' last quote)
/// to save finding the value's end first. Elsewhere the output is zeroed
/// and the whole input checked before a refusal, work in the length given.
#[inline]
pub(crate) fn stops_at_a_bad_digit(digits: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if digits > SHORT_DIGITS {
        return crate::scan::arch::avx2_available();
    }
    let _ = digits;
    false
}

/// Decodes `digits` (an even number, already counted) into a new slice of
/// `arena`. Long data on x86_64 with AVX2 is written straight into the
/// arena's fresh bytes, checked and decoded in one pass without zeroing
/// them first (the zeroing cost a quarter of an `eth_sendRawTransaction`
/// decode); a refused value gives its bytes back to the arena (it was the
/// latest allocation).
#[inline]
pub(crate) fn decode_digits_in<'b>(
    digits: &[u8],
    arena: &'b bumpalo::Bump,
) -> Result<&'b [u8], Reason> {
    let len = digits.len() / 2;
    let mut out = bumpalo::collections::Vec::with_capacity_in(len, arena);
    #[cfg(target_arch = "x86_64")]
    if digits.len() > SHORT_DIGITS && crate::scan::arch::avx2_available() {
        // SAFETY: the CPU has AVX2 (checked just above); `out` has room
        // for `len` bytes, what the kernel writes for `digits` (at least
        // 32 of them, as it needs).
        if unsafe { avx2::decode(digits, out.as_mut_ptr()) } {
            // SAFETY: the kernel wrote all `len` bytes.
            unsafe { out.set_len(len) };
            return Ok(out.into_bump_slice());
        }
        return Err(Reason::InvalidDigit);
    }
    out.resize(len, 0);
    decode_digits(digits, &mut out)?;
    Ok(out.into_bump_slice())
}

/// Long DATA into memory that needs no zeroing first: 64 digits a step,
/// the last step overlapping the one before when the count is not a
/// multiple of 32.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::*;

    /// Checks and decodes `digits` (an even number, at least 32) into the
    /// `digits.len() / 2` bytes at `out`; `false` when a byte is not a
    /// hex digit (found within [`CHECK_EVERY`] digits of it: the bytes at
    /// `out` are then partly written, with meaningless values).
    ///
    /// # Safety
    ///
    /// The CPU has AVX2, and `out` is valid for writes of
    /// `digits.len() / 2` bytes. (Fewer than 32 digits, or an odd number,
    /// are refused: the loads and stores below count on both.)
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn decode(digits: &[u8], out: *mut u8) -> bool {
        let len = digits.len();
        if len < 32 || !len.is_multiple_of(2) {
            return false;
        }
        let at_digit = |i: usize| {
            debug_assert!(i + 32 <= len);
            // SAFETY: `i + 32 <= len`, so the 32 bytes are in `digits`;
            // `loadu` has no alignment requirement.
            unsafe { _mm256_loadu_si256(digits.as_ptr().add(i).cast()) }
        };
        let mut at = 0;
        // The bytewise minimum of every vector's classes: a zero byte
        // somewhere means a byte that is not a hex digit. Checked every
        // `CHECK_EVERY` digits and at the end (a refused value's partly
        // written bytes are the caller's to drop), not at every step: the
        // caller that tries a parameter as the params' last one hands in
        // everything up to the params' last quote, and one that is not
        // the last is refused at its closing quote, not after decoding
        // the rest (a handler reading many DATA params decoded the rest of
        // the params for each, quadratic work).
        let mut classes = _mm256_set1_epi8(-1);
        while at + 64 <= len {
            // SAFETY: this function runs with AVX2 enabled.
            let (low, low_classes) = unsafe { nibble_pairs(at_digit(at)) };
            // SAFETY: as above.
            let (high, high_classes) = unsafe { nibble_pairs(at_digit(at + 32)) };
            classes = _mm256_min_epu8(classes, _mm256_min_epu8(low_classes, high_classes));
            // `packus` interleaves the two inputs' 128-bit halves; the
            // permute puts the 32 bytes back in order.
            let bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(low, high), 0b11_01_10_00);
            // SAFETY: bytes `at / 2 .. at / 2 + 32` of `out`, within its
            // `len / 2` since `at + 64 <= len`.
            unsafe { _mm256_storeu_si256(out.add(at / 2).cast(), bytes) };
            at += 64;
            if at.is_multiple_of(CHECK_EVERY) {
                let bad = _mm256_cmpeq_epi8(classes, _mm256_setzero_si256());
                if _mm256_testz_si256(bad, bad) == 0 {
                    return false;
                }
            }
        }
        while at < len {
            // The last 32 digits when fewer than 32 remain past `at`.
            let from = at.min(len - 32);
            // SAFETY: this function runs with AVX2 enabled.
            let (pairs, pair_classes) = unsafe { nibble_pairs(at_digit(from)) };
            classes = _mm256_min_epu8(classes, pair_classes);
            let bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0b11_01_10_00);
            // SAFETY: bytes `from / 2 .. from / 2 + 16` of `out`, within
            // its `len / 2` since `from + 32 <= len`.
            unsafe { _mm_storeu_si128(out.add(from / 2).cast(), _mm256_castsi256_si128(bytes)) };
            at = from + 32;
        }
        let bad = _mm256_cmpeq_epi8(classes, _mm256_setzero_si256());
        _mm256_testz_si256(bad, bad) == 1
    }

    /// How many digits [`decode`] reads between two checks for a byte that
    /// is not a digit (a multiple of its 64-digit step).
    pub(super) const CHECK_EVERY: usize = 1024;

    /// Checks and decodes exactly `2 * N` digits (`N` from 16 to 32) in
    /// two vectors, the first 32 digits and the last 32 (overlapping when
    /// `N < 32`); `None` when a byte is not a hex digit. The `N` bytes are
    /// the first of the 32 returned (the rest are zero): one 32-byte
    /// store, which every read of the caller's finds whole (see below).
    ///
    /// # Safety
    ///
    /// The CPU has AVX2, and `digits.len() == 2 * N`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn decode_array<const N: usize>(digits: &[u8]) -> Option<Aligned32> {
        debug_assert!((16..=32).contains(&N));
        debug_assert_eq!(digits.len(), 2 * N);
        // SAFETY: `digits` holds `2 * N >= 32` bytes, so both 32-byte
        // loads (at 0 and at `2 * N - 32`) are inside it; `loadu` has no
        // alignment requirement.
        let (first, last) = unsafe {
            (
                _mm256_loadu_si256(digits.as_ptr().cast()),
                _mm256_loadu_si256(digits.as_ptr().add(2 * N - 32).cast()),
            )
        };
        // SAFETY: this function runs with AVX2 enabled.
        let (first, first_classes) = unsafe { nibble_pairs(first) };
        // SAFETY: as above.
        let (last, last_classes) = unsafe { nibble_pairs(last) };
        let classes = _mm256_min_epu8(first_classes, last_classes);
        let bad = _mm256_cmpeq_epi8(classes, _mm256_setzero_si256());
        if _mm256_testz_si256(bad, bad) == 0 {
            return None;
        }
        // Low half: the first 16 bytes; high half: the last 16.
        let bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(first, last), 0b11_01_10_00);
        // The high half moved down by `32 - N` bytes, so that the vector
        // holds the `N` bytes in order from its first, returned as one
        // store. (Two overlapping 16-byte stores made the caller's loads
        // that spanned both wait for them to reach the cache: a stall of a
        // dozen cycles or more per address, a sixth of an
        // `eth_getBalance` decode.)
        // SAFETY: `32 - N + 16 <= 32` for `N >= 16`, within `SHIFT_DOWN`.
        let down = unsafe { _mm_loadu_si128(SHIFT_DOWN.as_ptr().add(32 - N).cast()) };
        let high = _mm_shuffle_epi8(_mm256_extracti128_si256::<1>(bytes), down);
        let bytes = _mm256_inserti128_si256::<1>(bytes, high);
        let mut all = Aligned32([0u8; 32]);
        // SAFETY: `all` holds 32 bytes.
        unsafe { _mm256_storeu_si256(all.0.as_mut_ptr().cast(), bytes) };
        Some(all)
    }

    /// 32 bytes on a 32-byte boundary: the kernel's one store never
    /// straddles two cache lines (a split store is not forwarded to the
    /// loads that follow it; with the `Option`'s tag in front, the bytes
    /// sat at an odd address).
    #[repr(C, align(32))]
    pub(super) struct Aligned32(pub(super) [u8; 32]);

    /// Shuffle indices that move a vector's bytes down: the 16 from
    /// `SHIFT_DOWN[k]` move byte `k` to the first place (and zero the
    /// last `k`).
    static SHIFT_DOWN: [u8; 32] = {
        let mut t = [0x80u8; 32];
        let mut i = 0;
        while i < 16 {
            t[i] = i as u8;
            i += 1;
        }
        t
    };

    /// Thirty-two hex digits as sixteen 16-bit lanes, each `high << 4 |
    /// low` of its digit pair, and each byte's classes: zero where the byte
    /// is not a hex digit.
    ///
    /// One 16-entry table (`vpshufb`) indexed by the high nibble gives
    /// what to add to the byte to make its value (`'0'` is 0x30, `'A'`
    /// 0x41, `'a'` 0x61: 0xd0, 0xc9 and 0xa9, mod 256) and, in the same
    /// byte, the classes it could be in: bit 4 (0x10) is set in the
    /// digits' offset only, bit 0 in the letters' only, neither in the 0
    /// of every other high nibble. A second table, indexed by the low
    /// nibble (`vpshufb` reads the byte itself: a byte with its top bit
    /// set looks up 0), gives the classes that nibble fits (digits 0-9,
    /// letters 1-6). A byte is a hex digit when the two share a class.
    /// Seven operations a vector (the callers compare the classes with
    /// zero once, for all vectors); a table for the value and another for
    /// the class of the high nibble took nine.
    ///
    /// # Safety
    ///
    /// The CPU has AVX2. (Not a `#[target_feature]` function: those cannot
    /// be `inline(always)`, and this runs once or twice per vector inside
    /// the decoders' loops.)
    #[inline(always)]
    unsafe fn nibble_pairs(v: __m256i) -> (__m256i, __m256i) {
        const DIGIT: i8 = 0x10;
        const LETTER: i8 = 0x01;
        const BOTH: i8 = DIGIT | LETTER;
        // Offsets whose class bits are as above: 0xd0 has bit 4 and not
        // bit 0, 0xc9 and 0xa9 bit 0 and not bit 4.
        const TO_DIGIT: i8 = 0xd0_u8 as i8;
        const TO_UPPER: i8 = 0xc9_u8 as i8;
        const TO_LOWER: i8 = 0xa9_u8 as i8;
        // SAFETY: register-only AVX2 intrinsics; the caller vouches for
        // AVX2 (this function's contract).
        unsafe {
            let high = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
            // `vpshufb` looks up within each 128-bit half: both halves
            // hold the same table.
            #[rustfmt::skip]
            let offset = _mm256_shuffle_epi8(_mm256_setr_epi8(
                0, 0, 0, TO_DIGIT, TO_UPPER, 0, TO_LOWER, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, TO_DIGIT, TO_UPPER, 0, TO_LOWER, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ), high);
            #[rustfmt::skip]
            let low_class = _mm256_shuffle_epi8(_mm256_setr_epi8(
                DIGIT, BOTH, BOTH, BOTH, BOTH, BOTH, BOTH, DIGIT, DIGIT, DIGIT, 0, 0, 0, 0, 0, 0,
                DIGIT, BOTH, BOTH, BOTH, BOTH, BOTH, BOTH, DIGIT, DIGIT, DIGIT, 0, 0, 0, 0, 0, 0,
            ), v);
            let classes = _mm256_and_si256(offset, low_class);
            let value = _mm256_add_epi8(v, offset);
            // Unsigned nibble times signed weight, adjacent pairs summed:
            // the first digit of a pair weighs 16, the second 1.
            let pairs = _mm256_maddubs_epi16(value, _mm256_set1_epi16(0x0110));
            (pairs, classes)
        }
    }
}

/// Addresses and hashes (40 and 64 digits) in a few vectors, inlined where
/// they are read: const-hex spent about 200 instructions on an address
/// (its run-time dispatch, a check pass and a decode pass), this about 60.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use core::arch::x86_64::*;

    use super::Reason;

    /// Decodes `digits` (16 to 64 of them, an even number) into `out`
    /// (half as many bytes): 16 digits per vector, the last vector
    /// overlapping the one before when the count is not a multiple of 16.
    #[inline(always)]
    pub(super) fn decode(digits: &[u8], out: &mut [u8]) -> Result<(), Reason> {
        debug_assert!(digits.len() >= 16 && digits.len().is_multiple_of(2));
        debug_assert_eq!(digits.len(), 2 * out.len());
        let mut valid = true;
        let mut at = 0;
        loop {
            // The last 16 digits when fewer than 16 remain past `at`.
            let from = at.min(digits.len() - 16);
            let chunk: &[u8; 16] = digits[from..from + 16].try_into().unwrap();
            let (bytes, ok) = eight_bytes(chunk);
            valid &= ok;
            out[from / 2..from / 2 + 8].copy_from_slice(&bytes.to_le_bytes());
            at = from + 16;
            if at == digits.len() {
                break;
            }
        }
        if valid {
            Ok(())
        } else {
            Err(Reason::InvalidDigit)
        }
    }

    /// Sixteen hex digits, as eight bytes (the first digit the high nibble
    /// of the first byte), and whether all sixteen are hex digits.
    #[inline(always)]
    fn eight_bytes(chunk: &[u8; 16]) -> (u64, bool) {
        // SAFETY: `chunk` is 16 readable bytes; `loadu` has no alignment
        // requirement; SSE2 is part of the x86_64 baseline.
        let v = unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) };
        // SAFETY: register-only SSE2 intrinsics, available on every x86_64
        // CPU (the target enables SSE2).
        unsafe {
            // Digits: `b - '0'` at most 9 (unsigned). Letters: `(b | 0x20)
            // - 'a'` at most 5, for `A-F` and `a-f` only.
            let digit = _mm_sub_epi8(v, _mm_set1_epi8(b'0' as i8));
            let is_digit = _mm_cmpeq_epi8(_mm_min_epu8(digit, _mm_set1_epi8(9)), digit);
            let letter = _mm_sub_epi8(
                _mm_or_si128(v, _mm_set1_epi8(0x20)),
                _mm_set1_epi8(b'a' as i8),
            );
            let is_letter = _mm_cmpeq_epi8(_mm_min_epu8(letter, _mm_set1_epi8(5)), letter);
            let value = _mm_or_si128(
                _mm_and_si128(is_digit, digit),
                _mm_and_si128(is_letter, _mm_add_epi8(letter, _mm_set1_epi8(10))),
            );
            let ok = _mm_movemask_epi8(_mm_or_si128(is_digit, is_letter)) == 0xffff;
            // Each 16-bit lane holds a digit pair, the high nibble's digit
            // in its low byte: byte = low << 4 | high byte.
            let high = _mm_slli_epi16(_mm_and_si128(value, _mm_set1_epi16(0x00ff)), 4);
            let low = _mm_srli_epi16(value, 8);
            let pairs = _mm_or_si128(high, low);
            let packed = _mm_packus_epi16(pairs, pairs);
            (_mm_cvtsi128_si64(packed) as u64, ok)
        }
    }
}

/// A DATA value of exactly `N` bytes.
#[inline(always)]
pub(crate) fn data_array<const N: usize>(s: &[u8]) -> Result<[u8; N], Reason> {
    let digits = data_digits(s)?;
    if digits.len() != 2 * N {
        return Err(Reason::Length);
    }
    decode_array(digits)
}

/// A DATA string of exactly `N` bytes starting at
/// `buf[start]` (its opening quote), decoded with its end found by the
/// decoding itself: when the `2N` bytes after `"0x` are all hex digits and
/// a quote follows, that quote closes the string (no quote or backslash
/// came before it). Returns the value and the index after the string, or
/// `None` when the text is anything else (the caller takes the slow path).
#[inline(always)]
pub(crate) fn fixed_at<const N: usize>(buf: &[u8], start: usize) -> Option<([u8; N], usize)> {
    let end = start + 2 * N + 4;
    let s = buf.get(start..end)?;
    if s[0] != b'"' || s[1] != b'0' || s[2] != b'x' || s[end - start - 1] != b'"' {
        return None;
    }
    let out = decode_array(&s[3..3 + 2 * N]).ok()?;
    Some((out, end))
}

/// `"0x…"` for `bytes` (lowercase, two digits per byte), quotes included,
/// into `out`, which holds `2 * bytes.len() + 4` bytes; returns that
/// length.
#[inline(always)]
pub(crate) fn encode_quoted(bytes: &[u8], out: &mut [u8]) -> usize {
    let n = 2 * bytes.len();
    out[..3].copy_from_slice(b"\"0x");
    const_hex::encode_to_slice(bytes, &mut out[3..3 + n]).expect("the buffer is sized for it");
    out[3 + n] = b'"';
    n + 4
}

/// `"0x…"` for a big-endian number of `N` bytes without leading zero
/// digits (`"0x0"` for zero), into `out` (at least `2 * N + 4` bytes);
/// returns the length.
#[inline(always)]
pub(crate) fn encode_quantity_be<const N: usize>(
    be: &[u8; N],
    leading_zero_bits: u32,
    out: &mut [u8],
) -> usize {
    let mut digits = [0u8; 64];
    let all = 2 * N;
    const_hex::encode_to_slice(be, &mut digits[..all]).expect("sized for it");
    let skip = ((leading_zero_bits / 4) as usize).min(all - 1);
    let n = all - skip;
    out[..3].copy_from_slice(b"\"0x");
    out[3..3 + n].copy_from_slice(&digits[skip..all]);
    out[3 + n] = b'"';
    n + 4
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A digit at a time through the table: the reference for `fold`.
    fn fold_by_table(digits: &[u8]) -> Result<u64, Reason> {
        let mut v = 0u64;
        for &d in digits {
            let x = HEX_VALUE[d as usize];
            if x & 0x80 != 0 {
                return Err(Reason::InvalidDigit);
            }
            v = v << 4 | x as u64;
        }
        Ok(v)
    }

    #[test]
    fn fold_agrees_with_a_digit_at_a_time() {
        // Every count up to 16, random digits of both cases, and every
        // byte value at every position of a few of them.
        let alphabet = b"0123456789abcdefABCDEF";
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for n in 0..=16usize {
            for round in 0..40 {
                let mut digits: Vec<u8> = (0..n)
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                    .collect();
                assert_eq!(fold(&digits), fold_by_table(&digits), "{digits:?}");
                if round < 3 {
                    for at in 0..n {
                        let keep = digits[at];
                        for b in 0..=255u8 {
                            digits[at] = b;
                            assert_eq!(fold(&digits), fold_by_table(&digits), "{n} {at} {b:#x}");
                        }
                        digits[at] = keep;
                    }
                }
            }
        }
        assert_eq!(fold(b"ffffffffffffffff"), Ok(u64::MAX));
        assert_eq!(fold(b"1312d00"), Ok(20_000_000));
    }

    #[test]
    fn quantity_table() {
        let ok: &[(&str, u64)] = &[
            ("0x0", 0),
            ("0x1", 1),
            ("0xa", 10),
            ("0xA", 10),
            ("0x1b4", 0x1b4),
            ("0xDeadBeef", 0xdead_beef),
            ("0xffffffffffffffff", u64::MAX),
            ("0x1000000000000000", 1 << 60),
            // As geth's hexutil reads them.
            ("0X1", 1),
            ("0XaB", 0xab),
            ("", 0),
        ];
        for &(s, v) in ok {
            assert_eq!(quantity_u64(s.as_bytes()), Ok(v), "{s}");
            assert_eq!(quantity_u128(s.as_bytes()), Ok(v as u128), "{s}");
        }
        let bad: &[(&str, Reason)] = &[
            ("0", Reason::MissingPrefix),
            ("1", Reason::MissingPrefix),
            ("x1", Reason::MissingPrefix),
            ("X1", Reason::MissingPrefix),
            ("0x", Reason::EmptyQuantity),
            ("0X", Reason::EmptyQuantity),
            ("0X01", Reason::LeadingZeros),
            ("0x00", Reason::LeadingZeros),
            ("0x01", Reason::LeadingZeros),
            ("0x0g", Reason::LeadingZeros),
            ("0xg", Reason::InvalidDigit),
            ("0x1g", Reason::InvalidDigit),
            ("0x 1", Reason::InvalidDigit),
            ("0x1 ", Reason::InvalidDigit),
            ("0x-1", Reason::InvalidDigit),
            ("0x10000000000000000", Reason::Overflow64),
            ("0x1000000000000000g", Reason::InvalidDigit),
        ];
        for &(s, r) in bad {
            assert_eq!(quantity_u64(s.as_bytes()), Err(r), "{s}");
        }
        assert_eq!(
            quantity_u128(b"0xffffffffffffffffffffffffffffffff"),
            Ok(u128::MAX)
        );
        assert_eq!(
            quantity_u128(b"0x100000000000000000000000000000000"),
            Err(Reason::Overflow128)
        );
        assert_eq!(quantity_u128(b"0x10000000000000000"), Ok(1 << 64));
    }

    #[test]
    fn fixed_at_finds_the_end() {
        let h = b"\"0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b\",";
        let (v, end) = fixed_at::<32>(h, 0).unwrap();
        assert_eq!((v[0], v[31], end), (0x88, 0x4b, 68));
        assert!(fixed_at::<32>(&h[..60], 0).is_none());
        assert!(fixed_at::<20>(h, 0).is_none());
        assert!(fixed_at::<2>(b"\"0x0xab\"", 0).is_none());
        assert!(fixed_at::<2>(b"\"0xa\\\"\"", 0).is_none());
    }

    /// The SSE2 decoder (16 to 64 digits) and the arena decoder (AVX2
    /// past 64 digits) against a byte-at-a-time reference, on valid digits
    /// of both cases and with each byte value put at each position (up to
    /// 80 digits; past that at the edges of the vectors and steps).
    /// [`decode_array`] for the sizes it has a kernel for (its first and
    /// last, and the address's and hash's), `None` for other lengths.
    fn fixed_size(digits: &[u8]) -> Option<Result<Vec<u8>, Reason>> {
        Some(match digits.len() {
            32 => decode_array::<16>(digits).map(|a| a.to_vec()),
            34 => decode_array::<17>(digits).map(|a| a.to_vec()),
            40 => decode_array::<20>(digits).map(|a| a.to_vec()),
            62 => decode_array::<31>(digits).map(|a| a.to_vec()),
            64 => decode_array::<32>(digits).map(|a| a.to_vec()),
            _ => return None,
        })
    }

    #[test]
    fn short_data_decodes_like_the_reference() {
        let reference = |digits: &[u8]| -> Option<Vec<u8>> {
            digits
                .chunks(2)
                .map(|p| {
                    let (h, l) = (HEX_VALUE[p[0] as usize], HEX_VALUE[p[1] as usize]);
                    ((h | l) & 0x80 == 0).then_some(h << 4 | l)
                })
                .collect()
        };
        let alphabet = b"0123456789abcdefABCDEF";
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut arena = bumpalo::Bump::new();
        // Past 80 digits every even count modulo 64 once, in two rounds;
        // then counts around the long kernel's checks (every
        // `avx2::CHECK_EVERY` digits).
        let around_checks = [1022, 1024, 1026, 1088, 2046, 2048, 2050, 3074];
        for len in (16..=80)
            .step_by(2)
            .chain((82..=274).step_by(6))
            .chain(around_checks)
        {
            for round in 0..if len <= 80 { 4 } else { 2 } {
                arena.reset();
                let mut digits: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        alphabet[(seed % alphabet.len() as u64) as usize]
                    })
                    .collect();
                let mut out = vec![0u8; len / 2];
                assert_eq!(decode_digits(&digits, &mut out), Ok(()), "{len}");
                assert_eq!(Some(out.clone()), reference(&digits));
                assert_eq!(decode_digits_in(&digits, &arena), Ok(&out[..]), "{len}");
                if let Some(array) = fixed_size(&digits) {
                    assert_eq!(array, Ok(out.clone()), "{len}");
                }
                // Every byte value at a few positions (all of them in the
                // first round of the shorter lengths); in the later rounds
                // and the longest lengths, the bytes around the digits'
                // ranges under every high nibble (the kernels classify by
                // nibbles) and a few more.
                let values: Vec<u8> = if round == 0 && len <= 274 {
                    (0..=255).collect()
                } else {
                    (0..16u8)
                        .flat_map(|high| {
                            [0x0, 0x1, 0x6, 0x7, 0x9, 0xa, 0xf].map(|low| high << 4 | low)
                        })
                        .chain(*b"/GgxX")
                        .collect()
                };
                let positions: Vec<usize> = if round == 0 && len <= 80 {
                    (0..len).collect()
                } else {
                    let edges = [
                        0,
                        1,
                        31,
                        32,
                        63,
                        64,
                        65,
                        127,
                        128,
                        len.saturating_sub(33),
                        len.saturating_sub(32),
                        1023,
                        1024,
                        1025,
                        2047,
                        2048,
                        2049,
                    ];
                    let mut at: Vec<usize> = edges.into_iter().filter(|&i| i < len).collect();
                    at.extend([len / 2, len - 2, len - 1]);
                    at
                };
                // One digit changes at a time: the reference decodes its
                // pair, the other bytes are those of the unchanged digits
                // (decoding all of them again for each of the 256 values
                // made this test minutes long under an emulated CPU).
                let base = reference(&digits).expect("alphabet digits");
                for at in positions {
                    let keep = digits[at];
                    let pair = at & !1;
                    for &b in &values {
                        digits[at] = b;
                        let want = reference(&digits[pair..pair + 2]).map(|byte| {
                            let mut bytes = base.clone();
                            bytes[pair / 2] = byte[0];
                            bytes
                        });
                        let got = decode_digits(&digits, &mut out);
                        let in_arena = decode_digits_in(&digits, &arena);
                        // The SSE2 decoder, which a CPU without AVX2 uses
                        // for addresses and hashes too.
                        #[cfg(target_arch = "x86_64")]
                        if len <= SHORT_DIGITS {
                            let mut sse2_out = vec![0u8; len / 2];
                            let sse2 = sse2::decode(&digits, &mut sse2_out);
                            assert_eq!(sse2.is_ok(), want.is_some(), "sse2 {len} {at} {b:#x}");
                            if let Some(bytes) = &want {
                                assert_eq!(&sse2_out, bytes, "sse2 {len} {at} {b:#x}");
                            }
                        }
                        if let Some(array) = fixed_size(&digits) {
                            assert_eq!(array.ok(), want, "array {len} {at} {b:#x}");
                        }
                        match want {
                            Some(bytes) => {
                                assert_eq!(got, Ok(()), "{len} {at} {b:#x}");
                                assert_eq!(out, bytes, "{len} {at} {b:#x}");
                                assert_eq!(in_arena, Ok(&bytes[..]), "{len} {at} {b:#x}");
                            }
                            None => {
                                assert_eq!(got, Err(Reason::InvalidDigit), "{len} {at} {b:#x}");
                                assert_eq!(
                                    in_arena,
                                    Err(Reason::InvalidDigit),
                                    "{len} {at} {b:#x}"
                                );
                            }
                        }
                    }
                    digits[at] = keep;
                }
            }
        }
    }

    #[test]
    fn data_table() {
        assert_eq!(data_array::<2>(b"0xabCD"), Ok([0xab, 0xcd]));
        assert_eq!(data_array::<2>(b"0xabc"), Err(Reason::OddLength));
        assert_eq!(data_array::<2>(b"abcd"), Err(Reason::MissingPrefix));
        assert_eq!(data_array::<2>(b"0xabcdef"), Err(Reason::Length));
        assert_eq!(data_array::<2>(b"0xabcg"), Err(Reason::InvalidDigit));
        assert_eq!(data_array::<2>(b"0x0xab"), Err(Reason::InvalidDigit));
        assert_eq!(data_array::<2>(b"0x0Xab"), Err(Reason::InvalidDigit));
        assert_eq!(data_array::<0>(b"0x"), Ok([]));
        let mut out = [0u8; 70];
        let n = encode_quoted(&[0, 0xab, 0x0f], &mut out);
        assert_eq!(&out[..n], b"\"0x00ab0f\"");
        let n = encode_quantity_be(&[0u8; 8], 64, &mut out);
        assert_eq!(&out[..n], b"\"0x0\"");
        let n = encode_quantity_be(&0x1b4u64.to_be_bytes(), 0x1b4u64.leading_zeros(), &mut out);
        assert_eq!(&out[..n], b"\"0x1b4\"");
    }
}

/// The hex kernels next to an unreadable page: a read past the slice
/// faults; their answers checked against const-hex.
#[cfg(all(test, target_os = "linux"))]
mod at_page_edges {
    use super::*;
    use crate::guard_page::Guarded;

    #[test]
    fn hex_kernels_read_nothing_past_their_slice() {
        let mut guarded = Guarded::new();
        let arena = bumpalo::Bump::new();
        for len in 0..=600usize {
            for bad in [None, Some(0), Some(len / 2), Some(len.saturating_sub(1))] {
                let mut digits: Vec<u8> = (0..len)
                    .map(|i| b"0123456789abcdefABCDEF"[i % 22])
                    .collect();
                let bad = bad.filter(|&b| b < len);
                if let Some(b) = bad {
                    digits[b] = b'g';
                }
                let d = guarded.at_end(&digits);
                let want = (len % 2 == 0 && bad.is_none()).then(|| const_hex::decode(d).unwrap());
                if len % 2 == 0 {
                    let mut out = vec![0u8; len / 2];
                    let got = decode_digits(d, &mut out).ok().map(|()| out);
                    assert_eq!(got, want, "decode_digits, {len} digits");
                    let got = decode_digits_in(d, &arena).ok().map(|o| o.to_vec());
                    assert_eq!(got, want, "decode_digits_in, {len} digits");
                }
                let _ = fixed_at::<20>(d, 0);
                let _ = fixed_at::<32>(d, 0);
                let _ = quantity_u64(d);
                let _ = quantity_limbs::<4>(d);
                macro_rules! arrays {
                    ($($n:literal)*) => {$(
                        if len == 2 * $n {
                            let got = decode_array::<$n>(d).ok().map(|a| a.to_vec());
                            assert_eq!(got, want, "decode_array::<{}>", $n);
                        }
                    )*};
                }
                arrays!(1 8 15 16 17 20 24 31 32);
            }
        }
    }
}
