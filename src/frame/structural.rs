//! The framers' searches over raw bytes: where values end (concatenated
//! JSON), and where lines end.
//!
//! # Value ends
//!
//! The rule, applied from a saved [`State`] so that a scan can stop at the
//! end of the bytes received and resume when more arrive:
//!
//! * a backslash that is not itself escaped escapes the next byte (inside a
//!   string that is JSON's rule; valid JSON has no backslash outside strings,
//!   so the rule costs nothing there and keeps the backends identical on any
//!   input);
//! * an unescaped `"` opens or closes a string;
//! * outside strings, an unescaped `{` or `[` opens a level, `}` or `]`
//!   closes one, and a top-level value ends just after the byte that closes
//!   its last level;
//! * a closing bracket with no level open stops the scan (garbage, which the
//!   framer reports when it gets there).
//!
//! One scan runs over everything received and records a batch of value ends
//! ([`MAX_ENDS`]), so the cost of starting a scan is paid once per batch of
//! messages, and every byte is classified once. Validating is the parser's
//! job, on the frame; the framer checks only that each value starts with `{`
//! or `[` after whitespace.
//!
//! Two backends implement the rule:
//!
//! * [`scalar`], the reference: byte by byte outside strings, and the crate's
//!   string kernel to jump over string content. Used off x86_64.
//! * `x86`: 64 bytes per step, as bitmasks: SSE2, or AVX2 (with POPCNT, BMI1
//!   and PCLMULQDQ) when the CPU has it, detected at run time. Per block,
//!   pseudo-code:
//!
//! ```text
//! quote, backslash, open, close = masks of '"', '\', '{' or '[', '}' or ']'
//! escaped = bits after each backslash that is not itself escaped
//!           (the carry says whether bit 0 is escaped by the previous block)
//! inside  = prefix_xor(quote & !escaped) ^ (in_string ? all : 0)
//!           (one carry-less multiplication by all ones with PCLMULQDQ)
//! open   &= !inside & !escaped;  close &= !inside & !escaped
//! if popcount(close) < depth or close == 0:         // no value ends here
//!     depth += popcount(open) - popcount(close)
//! else if popcount(close) == depth and no open below the last close:
//!     a value ends at the last close; depth = popcount(open)
//! else: walk the bracket bits in order, recording each return to depth 0
//! in_string = top bit of inside
//! ```
//!
//! The first two cases share one path without a branch between them: the
//! block where a value ends is usually its remaining closing brackets and
//! then the next value's opening ones, and a mispredicted branch there, once
//! per message, cost more than classifying the bytes. Measured on the
//! benchmark's Ethereum requests (5.7 MB, 24,000 values): AVX2 about 1 ms,
//! SSE2 1.4 ms, the scalar backend 1.8 ms.
//!
//! Both are tested against each other on random input, split anywhere.
//!
//! # Line ends
//!
//! [`newlines`]: the `\n`s of everything received, 64 bytes at a time (SSE2
//! or AVX2), in batches; `memchr` off x86_64, and as the test oracle.

/// How many value ends one scan records at most before it stops: at least
/// the number asked for (`1..=MAX_ENDS`), and the block scanner finishes
/// the block it is in, so at most `MAX_ENDS + 31`.
pub(super) const MAX_ENDS: usize = 32;

/// Room for the value ends of one scan.
pub(super) type Ends = [usize; MAX_ENDS + 32];

/// What the scan carries from one byte to the next, across calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct State {
    /// Levels open.
    pub depth: u64,
    /// Inside a string.
    pub in_string: bool,
    /// The last byte seen was a backslash that escapes the next one.
    pub escape: bool,
}

/// Where a search stopped, and how many positions it recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// Index in `buf` where the search stopped, with the scan's `state`
    /// saved as of it: `buf.len()`; where the batch filled up (just past
    /// that position for the byte-at-a-time backends, the end of its 64-byte
    /// block for the block backends); or, for [`scan`], a closing bracket
    /// with no level open.
    pub stop: usize,
    /// How many positions were written.
    pub ends: usize,
}

/// Scans `buf[pos..]` from `state`, writing into `ends` the index just past
/// each top-level value's end, in order, and stops once it has recorded
/// `batch` of them (`1..=MAX_ENDS`).
#[inline]
pub(super) fn scan(
    state: &mut State,
    buf: &[u8],
    pos: usize,
    ends: &mut Ends,
    batch: usize,
) -> Found {
    debug_assert!((1..=MAX_ENDS).contains(&batch));
    #[cfg(target_arch = "x86_64")]
    {
        x86::scan(state, buf, pos, ends, batch)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        scalar(state, buf, pos, ends, batch)
    }
}

/// How many `\n`s one [`newlines`] search records before it stops: at least
/// this many, at most `NEWLINE_BATCH + 63`.
pub(super) const NEWLINE_BATCH: usize = 32;

/// Room for the `\n`s of one search.
pub(super) type Newlines = [usize; NEWLINE_BATCH + 64];

/// Finds the `\n`s in `buf[pos..]`, writing their indices into `out` in
/// order, until it has found at least [`NEWLINE_BATCH`]: the newline framer's
/// search. Returns where it stopped (`buf.len()`, or the end of the block in
/// which the batch filled up) and how many it wrote.
///
/// One pass over many lines: a `memchr` call per line costs more in start-up
/// than in searching, on lines of a few hundred bytes. Measured on the
/// benchmark's Ethereum requests (5.7 MB, 24,000 lines): one `memchr` call
/// per line 0.46 ms, `memchr_iter` in batches 0.48 ms, these blocks 0.30 ms
/// (AVX2) and 0.41 ms (SSE2).
#[inline]
pub(super) fn newlines(buf: &[u8], pos: usize, out: &mut Newlines) -> Found {
    #[cfg(target_arch = "x86_64")]
    {
        x86::newlines(buf, pos, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        newlines_memchr(buf, pos, out)
    }
}

/// The portable backend (and the reference) of [`newlines`]: `memchr`.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(super) fn newlines_memchr(buf: &[u8], pos: usize, out: &mut Newlines) -> Found {
    let mut found = 0;
    for i in memchr::memchr_iter(b'\n', &buf[pos..]) {
        out[found] = pos + i;
        found += 1;
        if found == NEWLINE_BATCH {
            return Found {
                stop: pos + i + 1,
                ends: found,
            };
        }
    }
    Found {
        stop: buf.len(),
        ends: found,
    }
}

/// The block loop of [`newlines`], generic over the mask of `\n`s in a block.
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn newline_blocks(
    buf: &[u8],
    mut pos: usize,
    out: &mut Newlines,
    newline_mask: impl Fn(&[u8; 64]) -> u64,
) -> Found {
    let mut found = 0;
    while pos < buf.len() {
        let (mut mask, n) = match buf.get(pos..pos + 64) {
            Some(block) => (newline_mask(block.try_into().unwrap()), 64),
            None => {
                let n = buf.len() - pos;
                let mut tail = [b' '; 64];
                tail[..n].copy_from_slice(&buf[pos..]);
                (newline_mask(&tail), n)
            }
        };
        while mask != 0 {
            out[found] = pos + mask.trailing_zeros() as usize;
            found += 1;
            mask &= mask - 1;
        }
        pos += n;
        if found >= NEWLINE_BATCH {
            break;
        }
    }
    Found {
        stop: pos,
        ends: found,
    }
}

/// Byte classes of the scalar scan outside strings.
const PLAIN: u8 = 0;
const QUOTE: u8 = 1;
const OPEN: u8 = 2;
const CLOSE: u8 = 3;
const BACKSLASH: u8 = 4;

static CLASS: [u8; 256] = {
    let mut t = [PLAIN; 256];
    t[b'"' as usize] = QUOTE;
    t[b'{' as usize] = OPEN;
    t[b'[' as usize] = OPEN;
    t[b'}' as usize] = CLOSE;
    t[b']' as usize] = CLOSE;
    t[b'\\' as usize] = BACKSLASH;
    t
};

/// The reference backend: see the module docs.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(super) fn scalar(
    state: &mut State,
    buf: &[u8],
    mut pos: usize,
    ends: &mut Ends,
    batch: usize,
) -> Found {
    let len = buf.len();
    let mut found = 0;
    let State {
        mut depth,
        mut in_string,
        escape,
    } = *state;
    if escape {
        if pos >= len {
            return Found { stop: pos, ends: 0 };
        }
        pos += 1;
    }
    let mut escape = false;
    'outer: loop {
        if in_string {
            // Jump over string content to the next quote or backslash (a
            // control byte stops the kernel too; it is content here).
            loop {
                let at = crate::scan::arch::find_string_stop(buf, pos).at;
                match buf.get(at) {
                    Some(b'"') => {
                        pos = at + 1;
                        in_string = false;
                        break;
                    }
                    Some(b'\\') => {
                        if at + 1 >= len {
                            pos = len;
                            escape = true;
                            break 'outer;
                        }
                        pos = at + 2;
                    }
                    Some(_) => pos = at + 1,
                    None => {
                        pos = len;
                        break 'outer;
                    }
                }
            }
        }
        while let Some(&b) = buf.get(pos) {
            match CLASS[b as usize] {
                PLAIN => pos += 1,
                QUOTE => {
                    pos += 1;
                    in_string = true;
                    continue 'outer;
                }
                OPEN => {
                    depth += 1;
                    pos += 1;
                }
                CLOSE => {
                    if depth == 0 {
                        break 'outer;
                    }
                    depth -= 1;
                    pos += 1;
                    if depth == 0 {
                        ends[found] = pos;
                        found += 1;
                        if found == batch {
                            break 'outer;
                        }
                    }
                }
                _ => {
                    if pos + 1 >= len {
                        pos = len;
                        escape = true;
                        break 'outer;
                    }
                    pos += 2;
                }
            }
        }
        break;
    }
    *state = State {
        depth,
        in_string,
        escape,
    };
    Found {
        stop: pos,
        ends: found,
    }
}

/// Bitmasks of one 64-byte block: bit `i` for byte `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Masks {
    quote: u64,
    backslash: u64,
    /// `{` and `[`.
    open: u64,
    /// `}` and `]`.
    close: u64,
}

/// Bits of the bytes escaped by a backslash, and whether the byte after the
/// block is: each backslash that is not itself escaped escapes the next
/// byte; `carry` says whether bit 0 is escaped by the previous block.
/// Backslashes are rare, so a loop over them is cheap; it runs at most once
/// per two bytes of input.
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn escaped_bits(backslash: u64, carry: bool) -> (u64, bool) {
    let mut escaped = carry as u64;
    let mut starts = backslash & !escaped;
    while starts != 0 {
        let i = starts.trailing_zeros();
        if i == 63 {
            return (escaped, true);
        }
        let next = 1u64 << (i + 1);
        escaped |= next;
        // Clear this backslash, and the next byte if it is one (escaped, it
        // escapes nothing).
        starts &= starts - 1;
        starts &= !next;
    }
    (escaped, false)
}

/// Bit `i` of the result is the XOR of bits `0..=i` of `x`: with `x` the
/// quotes, the bits inside strings (opening quote included, closing quote
/// not).
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// The block loop, generic over the classifier (inlined into each backend's
/// entry point, so the classifier's intrinsics are compiled with its target
/// features).
///
/// Written for few mispredicted branches: every mask is computed for every
/// block, and the walk over a block's brackets (only for a block where the
/// depth may reach zero) records ends without a branch per bracket.
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn blocks(
    state: &mut State,
    buf: &[u8],
    mut pos: usize,
    ends: &mut Ends,
    batch: usize,
    classify: impl Fn(&[u8; 64]) -> Masks,
    prefix_xor: impl Fn(u64) -> u64,
) -> Found {
    let State {
        mut depth,
        mut in_string,
        mut escape,
    } = *state;
    let mut found = 0;
    while pos < buf.len() {
        let (m, n) = match buf.get(pos..pos + 64) {
            Some(block) => (classify(block.try_into().unwrap()), 64),
            None => {
                // The last partial block, padded with spaces (structurally
                // nothing).
                let n = buf.len() - pos;
                let mut tail = [b' '; 64];
                tail[..n].copy_from_slice(&buf[pos..]);
                (classify(&tail), n)
            }
        };
        let (escaped, carry) = if m.backslash == 0 && !escape {
            (0, false)
        } else {
            let (escaped, carry) = escaped_bits(m.backslash, escape);
            // In a partial block the byte after the last is bit `n`.
            (
                escaped,
                if n == 64 {
                    carry
                } else {
                    escaped >> n & 1 != 0
                },
            )
        };
        let inside = prefix_xor(m.quote & !escaped) ^ 0u64.wrapping_sub(in_string as u64);
        let outside = !inside & !escaped;
        let (open, close) = (m.open & outside, m.close & outside);
        let (opens, closes) = (open.count_ones() as u64, close.count_ones() as u64);
        // The usual block where a value ends holds exactly its remaining
        // closing brackets, then only opening ones (the next value's start):
        // the value ends at the last closing bracket. That case and the
        // blocks where no value can end (too few closing brackets) take one
        // path, without a branch between them; anything else is walked.
        let last = 63 - (close | 1).leading_zeros();
        let possible = close != 0 && closes >= depth;
        let usual = close != 0 && closes == depth && open & ((1u64 << last) - 1) == 0;
        if !possible || usual {
            ends[found] = pos + last as usize + 1;
            found += usual as usize;
            depth = depth - closes + opens;
            if found >= batch {
                escape = carry;
                in_string = inside >> (n - 1) & 1 != 0;
                pos += n;
                break;
            }
        } else {
            // Walk the brackets in order, +1 or -1 each, recording every
            // return to zero: the index is written for every bracket and kept
            // only when the depth is zero (`ends` has room for a block's
            // worth beyond `MAX_ENDS`), so there is no branch per bracket.
            let (depth_before, found_before) = (depth, found);
            let mut below = false;
            let mut brackets = open | close;
            while brackets != 0 {
                let i = brackets.trailing_zeros();
                brackets &= brackets - 1;
                depth = depth.wrapping_add(1).wrapping_sub(2 * (close >> i & 1));
                below |= depth == u64::MAX;
                ends[found] = pos + i as usize + 1;
                found += (depth == 0) as usize;
            }
            if below {
                return stray(state, pos, (open, close), depth_before, ends, found_before);
            }
            if found >= batch {
                escape = carry;
                in_string = inside >> (n - 1) & 1 != 0;
                pos += n;
                break;
            }
        }
        escape = carry;
        in_string = inside >> (n - 1) & 1 != 0;
        pos += n;
    }
    *state = State {
        depth,
        in_string,
        escape,
    };
    Found {
        stop: pos,
        ends: found,
    }
}

/// A block where the depth went below zero: walks it again to stop at the
/// closing bracket with nothing open (rare, so with branches).
#[cold]
#[inline(never)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn stray(
    state: &mut State,
    pos: usize,
    (open, close): (u64, u64),
    mut depth: u64,
    ends: &mut Ends,
    mut found: usize,
) -> Found {
    let mut brackets = open | close;
    loop {
        // The block has such a bracket: the walk that called this saw it.
        let i = brackets.trailing_zeros();
        brackets &= brackets - 1;
        if open >> i & 1 != 0 {
            depth += 1;
        } else if depth == 0 {
            // Stopped at a bracket: outside strings, not escaped.
            *state = State::default();
            return Found {
                stop: pos + i as usize,
                ends: found,
            };
        } else {
            depth -= 1;
            if depth == 0 {
                ends[found] = pos + i as usize + 1;
                found += 1;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use super::{Ends, Found, Masks, Newlines, State, blocks, newline_blocks};

    #[inline]
    pub(super) fn scan(
        state: &mut State,
        buf: &[u8],
        pos: usize,
        ends: &mut Ends,
        batch: usize,
    ) -> Found {
        if avx2_available() {
            // SAFETY: the CPU has what the AVX2 backend needs (checked just
            // above).
            unsafe { scan_avx2(state, buf, pos, ends, batch) }
        } else {
            scan_sse2(state, buf, pos, ends, batch)
        }
    }

    /// Whether the CPU has what [`scan_avx2`] needs (every AVX2 CPU made has
    /// the others; detection is cached by `std`).
    #[inline]
    pub(super) fn avx2_available() -> bool {
        crate::scan::arch::avx2_available()
            && std::is_x86_feature_detected!("popcnt")
            && std::is_x86_feature_detected!("bmi1")
            && std::is_x86_feature_detected!("pclmulqdq")
    }

    pub(super) fn scan_sse2(
        state: &mut State,
        buf: &[u8],
        pos: usize,
        ends: &mut Ends,
        batch: usize,
    ) -> Found {
        blocks(
            state,
            buf,
            pos,
            ends,
            batch,
            classify_sse2,
            super::prefix_xor,
        )
    }

    /// # Safety
    ///
    /// The CPU must support AVX2, POPCNT, BMI1 and PCLMULQDQ.
    #[target_feature(enable = "avx2,popcnt,bmi1,pclmulqdq")]
    pub(super) unsafe fn scan_avx2(
        state: &mut State,
        buf: &[u8],
        pos: usize,
        ends: &mut Ends,
        batch: usize,
    ) -> Found {
        // The closures inherit this function's target features.
        blocks(
            state,
            buf,
            pos,
            ends,
            batch,
            |block| classify_avx2(block),
            |quotes| prefix_xor_clmul(quotes),
        )
    }

    #[inline]
    pub(super) fn newlines(buf: &[u8], pos: usize, out: &mut Newlines) -> Found {
        if crate::scan::arch::avx2_available() {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { newlines_avx2(buf, pos, out) }
        } else {
            newlines_sse2(buf, pos, out)
        }
    }

    pub(super) fn newlines_sse2(buf: &[u8], pos: usize, out: &mut Newlines) -> Found {
        newline_blocks(buf, pos, out, |block| {
            let mut mask = 0;
            for k in 0..4 {
                // SAFETY: SSE2 is enabled for every x86_64 target; the load
                // reads bytes `16 * k..16 * k + 16` of the 64-byte array.
                unsafe {
                    let v = _mm_loadu_si128(block.as_ptr().add(16 * k).cast());
                    let eq = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\n' as i8));
                    mask |= (_mm_movemask_epi8(eq) as u32 as u64) << (16 * k);
                }
            }
            mask
        })
    }

    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn newlines_avx2(buf: &[u8], pos: usize, out: &mut Newlines) -> Found {
        // The closure inherits this function's target features.
        newline_blocks(buf, pos, out, |block| {
            // SAFETY: both 32-byte loads are inside the 64-byte array.
            let (a, b) = unsafe {
                (
                    _mm256_loadu_si256(block.as_ptr().cast()),
                    _mm256_loadu_si256(block.as_ptr().add(32).cast()),
                )
            };
            let nl = _mm256_set1_epi8(b'\n' as i8);
            (_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, nl)) as u32 as u64)
                | ((_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, nl)) as u32 as u64) << 32)
        })
    }

    /// SSE2 is part of the x86_64 baseline, so these instructions exist on
    /// every x86_64 CPU.
    #[inline(always)]
    fn classify_sse2(block: &[u8; 64]) -> Masks {
        let mut m = Masks {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for k in 0..4 {
            // SAFETY: SSE2 is enabled for every x86_64 target; the load reads
            // bytes `16 * k..16 * k + 16` of the 64-byte array (`loadu` has no
            // alignment requirement).
            unsafe {
                let v = _mm_loadu_si128(block.as_ptr().add(16 * k).cast());
                // `[` and `]` are `{` and `}` with bit 0x20 clear.
                let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
                let bits = |x: __m128i| (_mm_movemask_epi8(x) as u32 as u64) << (16 * k);
                m.quote |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)));
                m.backslash |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)));
                m.open |= bits(_mm_cmpeq_epi8(folded, _mm_set1_epi8(b'{' as i8)));
                m.close |= bits(_mm_cmpeq_epi8(folded, _mm_set1_epi8(b'}' as i8)));
            }
        }
        m
    }

    /// [`prefix_xor`](super::prefix_xor) in one carry-less multiplication
    /// by all ones.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn prefix_xor_clmul(x: u64) -> u64 {
        let product = _mm_clmulepi64_si128::<0>(_mm_set_epi64x(0, x as i64), _mm_set1_epi8(-1));
        _mm_cvtsi128_si64(product) as u64
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn classify_avx2(block: &[u8; 64]) -> Masks {
        // SAFETY: both 32-byte loads are inside the 64-byte array (`loadu`
        // has no alignment requirement).
        let (a, b) = unsafe {
            (
                _mm256_loadu_si256(block.as_ptr().cast()),
                _mm256_loadu_si256(block.as_ptr().add(32).cast()),
            )
        };
        let eq = |x, byte: u8| _mm256_cmpeq_epi8(x, _mm256_set1_epi8(byte as i8));
        let bits = |x: __m256i, y: __m256i| {
            (_mm256_movemask_epi8(x) as u32 as u64)
                | ((_mm256_movemask_epi8(y) as u32 as u64) << 32)
        };
        // `[` and `]` are `{` and `}` with bit 0x20 clear.
        let fold = _mm256_set1_epi8(0x20);
        let (fa, fb) = (_mm256_or_si256(a, fold), _mm256_or_si256(b, fold));
        Masks {
            quote: bits(eq(a, b'"'), eq(b, b'"')),
            backslash: bits(eq(a, b'\\'), eq(b, b'\\')),
            open: bits(eq(fa, b'{'), eq(fb, b'{')),
            close: bits(eq(fa, b'}'), eq(fb, b'}')),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Backend = fn(&mut State, &[u8], usize, &mut Ends, usize) -> Found;

    fn backends() -> Vec<(&'static str, Backend)> {
        #[allow(unused_mut)]
        let mut v: Vec<(&'static str, Backend)> = vec![("dispatch", scan)];
        #[cfg(target_arch = "x86_64")]
        {
            v.push(("sse2", x86::scan_sse2));
            if x86::avx2_available() {
                // SAFETY: the CPU has what the AVX2 backend needs (checked
                // just above).
                v.push(("avx2", |s, b, p, e, n| unsafe {
                    x86::scan_avx2(s, b, p, e, n)
                }));
            }
        }
        v
    }

    /// What a backend makes of `input` fed in pieces ending at `cuts`, as the
    /// framer drives it with `batch` ends per scan: every end (as an index
    /// into `input`), where it stopped for good (a stray closing bracket) if
    /// it did, and the final state.
    fn in_pieces(
        f: Backend,
        input: &[u8],
        cuts: &[usize],
        batch: usize,
    ) -> (Vec<usize>, Option<usize>, State) {
        let mut state = State::default();
        let mut all = Vec::new();
        let mut pos = 0;
        for &cut in cuts.iter().chain([&input.len()]) {
            let cut = cut.clamp(pos, input.len());
            loop {
                let mut ends = [0; MAX_ENDS + 32];
                let found = f(&mut state, &input[..cut], pos, &mut ends, batch);
                all.extend_from_slice(&ends[..found.ends]);
                assert!(found.stop >= pos);
                pos = found.stop;
                if found.ends >= batch {
                    continue;
                }
                if pos < cut {
                    // A closing bracket with nothing open.
                    assert!(matches!(input[pos], b'}' | b']'));
                    return (all, Some(pos), state);
                }
                break;
            }
        }
        (all, None, state)
    }

    fn check(input: &[u8], cuts: &[usize]) {
        let want = in_pieces(scalar, input, &[], MAX_ENDS);
        for (name, f) in backends() {
            // One end per scan (the framer finishing a single message) and
            // full batches find the same ends.
            for batch in [1, 3, MAX_ENDS] {
                assert_eq!(
                    in_pieces(f, input, cuts, batch),
                    want,
                    "{name}, batch {batch}, cuts {cuts:?}, input {:?}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn known_values() {
        // (input, value ends, stray closing bracket)
        let table: &[(&[u8], &[usize], Option<usize>)] = &[
            (b"{}", &[2], None),
            (br#"{"a":"}"}"#, &[9], None),
            (br#"{"a":"\"}"}  "#, &[11], None),
            (br#"{"a":"\\"}"#, &[10], None),
            (br#"["\\\"]\\"]"#, &[11], None),
            (br#"[[{"]":"["}]]"#, &[13], None),
            (br#"[[{"]":"["}]]]"#, &[13], Some(13)),
            (br#"{"a":"\"}"#, &[], None),
            (b"[\\]]", &[4], None),
            (b"[1,2", &[], None),
            (b"{} [] x {}", &[2, 5, 10], None),
            (b"{}]{}", &[2], Some(2)),
            (b"\\]{}", &[4], None),
            (br#"{}"]"{}"#, &[2, 7], None),
        ];
        for &(input, ends, stray) in table {
            let got = in_pieces(scalar, input, &[], MAX_ENDS);
            assert_eq!(
                (&got.0[..], got.1),
                (ends, stray),
                "{:?}",
                String::from_utf8_lossy(input)
            );
            for cut in 0..=input.len() {
                check(input, &[cut]);
            }
        }
    }

    #[test]
    fn more_ends_than_one_scan_records() {
        let mut input = Vec::new();
        for i in 0..3 * MAX_ENDS + 5 {
            input.extend_from_slice(if i % 2 == 0 { b"{}" } else { b" [[\"]\"]]\n" });
        }
        let (ends, stray, _) = in_pieces(scalar, &input, &[], MAX_ENDS);
        assert_eq!((ends.len(), stray), (3 * MAX_ENDS + 5, None));
        for cut in [0, 1, 63, 64, 65, 100, input.len() / 2] {
            check(&input, &[cut]);
        }
    }

    #[test]
    fn long_strings_and_deep_nesting_across_blocks() {
        for len in [0, 1, 62, 63, 64, 65, 127, 128, 129, 300] {
            for escapes in [false, true] {
                let mut v = b"[\"".to_vec();
                for i in 0..len {
                    v.push(if escapes && i % 3 == 0 { b'\\' } else { b']' });
                }
                // An odd or even run of backslashes right before the quote.
                v.extend_from_slice(b"\\\\\"");
                v.extend(std::iter::repeat_n(b'[', len));
                v.extend(std::iter::repeat_n(b']', len + 1));
                v.extend_from_slice(b"  {}");
                for cut in [0, 1, 31, 32, 33, 63, 64, 65, len, v.len() / 2, v.len() - 1] {
                    check(&v, &[cut]);
                    check(&v, &[cut, cut + 64, cut + 65]);
                }
            }
        }
    }

    #[test]
    fn pseudo_random_inputs_and_cuts() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        const ALPHABET: &[u8] = b"\"\"\\\\{}[]{}[]  ab:,\n\xc3\xa9";
        for _ in 0..20_000 {
            let len = (next() % 400) as usize;
            let mut input: Vec<u8> = (0..len)
                .map(|_| match next() % 8 {
                    // Mostly plain bytes, so values get long.
                    0..=3 => b'x',
                    _ => ALPHABET[(next() % ALPHABET.len() as u64) as usize],
                })
                .collect();
            if next() % 2 == 0 {
                // Balanced often enough to see many ends.
                input.insert(0, b'[');
            }
            let pieces = (next() % 4) as usize;
            let mut cuts: Vec<usize> = (0..pieces).map(|_| (next() as usize) % (len + 1)).collect();
            cuts.sort_unstable();
            check(&input, &cuts);
        }
    }

    #[test]
    fn newlines_agree_with_memchr() {
        type Search = fn(&[u8], usize, &mut Newlines) -> Found;
        #[allow(unused_mut)]
        let mut searches: Vec<(&str, Search)> = vec![("dispatch", newlines)];
        #[cfg(target_arch = "x86_64")]
        {
            searches.push(("sse2", x86::newlines_sse2));
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                searches.push(("avx2", |b, p, o| unsafe { x86::newlines_avx2(b, p, o) }));
            }
        }
        let all = |f: Search, buf: &[u8], mut pos: usize| {
            let mut v = Vec::new();
            while pos < buf.len() {
                let mut out = [0; NEWLINE_BATCH + 64];
                let found = f(buf, pos, &mut out);
                assert!(found.stop > pos && found.ends <= NEWLINE_BATCH + 63);
                assert!(found.ends >= NEWLINE_BATCH || found.stop == buf.len());
                v.extend_from_slice(&out[..found.ends]);
                pos = found.stop;
            }
            v
        };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in (0..300).chain([1000, 5000]) {
            for density in [2, 7, 64, 1000] {
                let buf: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if x.is_multiple_of(density) {
                            b'\n'
                        } else {
                            b'a' + (x % 26) as u8
                        }
                    })
                    .collect();
                for pos in [0, 1, 63, 64, 65, len / 2] {
                    let pos = pos.min(len);
                    let want = all(newlines_memchr, &buf, pos);
                    for (name, f) in &searches {
                        assert_eq!(all(*f, &buf, pos), want, "{name}, len {len}, pos {pos}");
                    }
                }
            }
        }
    }

    #[test]
    fn escaped_bits_rule() {
        // (backslashes, carry in) -> (escaped, carry out)
        assert_eq!(escaped_bits(0, false), (0, false));
        assert_eq!(escaped_bits(0, true), (1, false));
        assert_eq!(escaped_bits(0b1, false), (0b10, false));
        assert_eq!(escaped_bits(0b11, false), (0b10, false));
        assert_eq!(escaped_bits(0b111, false), (0b1010, false));
        assert_eq!(escaped_bits(0b1, true), (0b1, false));
        assert_eq!(escaped_bits(0b11, true), (0b101, false));
        assert_eq!(escaped_bits(1 << 63, false), (0, true));
        assert_eq!(escaped_bits(3 << 62, false), (1 << 63, false));
        // 64 backslashes: 32 pairs; with a carry, 31 pairs and one escaping
        // the next block's first byte.
        assert_eq!(
            escaped_bits(u64::MAX, false),
            (0xaaaa_aaaa_aaaa_aaaa, false)
        );
        assert_eq!(escaped_bits(u64::MAX, true), (0x5555_5555_5555_5555, true));
    }
}

/// The structural scan next to an unreadable page: a read past the slice
/// faults.
#[cfg(all(test, target_os = "linux"))]
mod at_page_edges {
    use super::*;
    use crate::guard_page::Guarded;

    #[test]
    fn the_scan_reads_nothing_past_its_slice() {
        let mut guarded = Guarded::new();
        let message = r#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0xab","data":"0x\"}\\"},"latest"]} [1,[2]]
{"a":"\u00e9é"}"#;
        let input = message.repeat(4).into_bytes();
        for len in 0..=input.len() {
            let buf = guarded.at_end(&input[..len]);
            for pos in [0, 1, len / 2, len.saturating_sub(1), len] {
                let pos = pos.min(len);
                let mut state = State::default();
                let mut ends = [0; MAX_ENDS + 32];
                let _ = scan(&mut state, buf, pos, &mut ends, MAX_ENDS);
                let mut newline_ends = [0; NEWLINE_BATCH + 64];
                let _ = newlines(buf, pos, &mut newline_ends);
            }
        }
    }
}
