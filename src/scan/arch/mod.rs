//! The string kernel: find where a run of plain string content ends.
//!
//! Inside a JSON string, only three kinds of byte need attention: the closing
//! quote, a backslash that starts an escape, and a raw control byte (< 0x20),
//! which RFC 8259 forbids. Everything else is content, so the scanner jumps
//! over it a vector at a time. Bytes >= 0x80 are content too, but the caller
//! must validate them as UTF-8, so the kernel also reports whether it passed
//! any.
//!
//! Each backend implements the same contract and is tested against
//! [`naive::find_string_stop`], over many lengths and alignments:
//!
//! * `x86_64`: SSE2 (part of the x86_64 baseline, so always present), with an
//!   AVX2 loop for long strings when the CPU has it, detected at run time.
//! * `aarch64`: NEON (part of the aarch64 baseline; a build with NEON
//!   turned off, `-C target-feature=-neon`, takes the portable one).
//! * anything else: eight bytes at a time in a `u64` (SWAR).
//!
//! x86_64 with AVX2 also classifies the bytes of runs of numbers for
//! `scan::number_run` (elsewhere the scalar number grammar does it all).

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod aarch64;
pub(crate) mod naive;
#[allow(dead_code)] // The portable backend is used off x86_64/aarch64, and in tests.
pub(crate) mod swar;
#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86_64::{avx2_available, number_run_avx2, scan_text_avx2};

/// Fuzzing builds only (`--cfg fuzzing`): whether the kernels chosen by
/// run-time detection (AVX2) are turned off, so that a fuzzing host with
/// AVX2 also runs the SSE2 paths that CPUs without it take.
#[cfg(fuzzing)]
static RUNTIME_SIMD_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Fuzzing builds only: see [`crate::fuzzing_runtime_simd`].
#[cfg(fuzzing)]
pub(crate) fn set_runtime_simd(on: bool) {
    RUNTIME_SIMD_OFF.store(!on, std::sync::atomic::Ordering::Relaxed);
}

/// Fuzzing builds only: whether run-time chosen kernels are turned off.
#[cfg(fuzzing)]
#[inline]
pub(crate) fn runtime_simd_off() -> bool {
    RUNTIME_SIMD_OFF.load(std::sync::atomic::Ordering::Relaxed)
}

/// Where a run of plain string content ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stop {
    /// Index of the first `"`, `\` or control byte at or after the start, or
    /// the input length if there is none.
    pub at: usize,
    /// Whether any byte >= 0x80 lies between the start and `at`.
    pub non_ascii: bool,
}

/// Finds the first `"`, `\` or byte < 0x20 in `buf[start..]`.
///
/// # Panics
///
/// Never for `start <= buf.len()`; `start > buf.len()` is a caller bug and
/// panics in debug builds.
#[inline(always)]
pub(crate) fn find_string_stop(buf: &[u8], start: usize) -> Stop {
    debug_assert!(start <= buf.len());
    #[cfg(target_arch = "x86_64")]
    {
        x86_64::find_string_stop(buf, start)
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    {
        aarch64::find_string_stop(buf, start)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", target_feature = "neon")
    )))]
    {
        swar::find_string_stop(buf, start)
    }
}

/// Finds the first `"`, `\`, byte < 0x20 or byte >= 0x80 in `buf[start..]`,
/// or `buf.len()`: the validating scanner's fast path, one compare cheaper
/// per vector than [`find_string_stop`] because it does not track non-ASCII
/// bytes (it stops at them, and the caller switches kernels).
#[inline(always)]
pub(crate) fn find_ascii_stop(buf: &[u8], start: usize) -> usize {
    debug_assert!(start <= buf.len());
    #[cfg(target_arch = "x86_64")]
    {
        x86_64::find_ascii_stop(buf, start)
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    {
        aarch64::find_ascii_stop(buf, start)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", target_feature = "neon")
    )))]
    {
        swar::find_ascii_stop(buf, start)
    }
}

/// Finds the first `"` or `\` in `buf[start..]`, or `buf.len()`: the
/// kernel of walks over text the scanner already validated (a string there
/// ends at its first quote that no backslash escapes, and holds no control
/// byte to look for).
#[inline(always)]
pub(crate) fn find_quote_or_backslash(buf: &[u8], start: usize) -> usize {
    debug_assert!(start <= buf.len());
    #[cfg(target_arch = "x86_64")]
    {
        x86_64::find_quote_or_backslash(buf, start)
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    {
        aarch64::find_quote_or_backslash(buf, start)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", target_feature = "neon")
    )))]
    {
        swar::find_quote_or_backslash(buf, start)
    }
}

/// An ASCII-kernel backend's entry point.
#[cfg(test)]
type AsciiBackend = fn(&[u8], usize) -> usize;

/// The ASCII-kernel backends this CPU can run.
#[cfg(test)]
pub(crate) fn ascii_backends() -> Vec<(&'static str, AsciiBackend)> {
    #[allow(unused_mut)]
    let mut v: Vec<(&'static str, AsciiBackend)> = vec![
        ("swar", swar::find_ascii_stop),
        ("dispatch", find_ascii_stop),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        v.push(("sse2", x86_64::find_ascii_stop_sse2_only));
        if x86_64::avx2_available() {
            v.push(("avx2", x86_64::find_ascii_stop_avx2_only));
        }
    }
    v
}

/// A backend's entry point.
#[cfg(test)]
type Backend = fn(&[u8], usize) -> Stop;

/// The backends this CPU can run, by name, for tests and benchmarks.
#[cfg(test)]
pub(crate) fn backends() -> Vec<(&'static str, Backend)> {
    #[allow(unused_mut)]
    let mut v: Vec<(&'static str, Backend)> = vec![
        ("swar", swar::find_string_stop),
        ("dispatch", find_string_stop),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        v.push(("sse2", x86_64::find_string_stop_sse2_only));
        if x86_64::avx2_available() {
            v.push(("avx2", x86_64::find_string_stop_avx2_only));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_all(buf: &[u8], start: usize) {
        let want = naive::find_string_stop(buf, start);
        for (name, f) in backends() {
            assert_eq!(
                f(buf, start),
                want,
                "backend {name}, start {start}, buf {buf:?}"
            );
        }
        let want = naive::find_quote_or_backslash(buf, start);
        for (name, f) in [
            (
                "swar",
                swar::find_quote_or_backslash as fn(&[u8], usize) -> usize,
            ),
            ("dispatch", find_quote_or_backslash),
        ] {
            assert_eq!(
                f(buf, start),
                want,
                "trusted backend {name}, start {start}, buf {buf:?}"
            );
        }
        let want = naive::find_ascii_stop(buf, start);
        for (name, f) in ascii_backends() {
            assert_eq!(
                f(buf, start),
                want,
                "ascii backend {name}, start {start}, buf {buf:?}"
            );
        }
    }

    #[test]
    fn every_length_alignment_and_stop_position() {
        // A stop byte of each kind at every position, in buffers of every
        // length up to past the switch to AVX2 (80 bytes in), a whole AVX2
        // step and a tail, from every start offset; with and without a
        // non-ASCII byte before or after the stop.
        let stops = [b'"', b'\\', 0x00, 0x1f, b'\n'];
        let mut buf = Vec::new();
        for len in 0..176usize {
            for &stop in &stops {
                for at in (0..len).chain([len]) {
                    buf.clear();
                    buf.resize(len, b'a');
                    if at < len {
                        buf[at] = stop;
                    }
                    // The kernels see only offsets from `start`: every
                    // start up to 18 in the short buffers, and in the
                    // longer ones (whose offsets from a later start are
                    // the shorter buffers' offsets from 0) a few, and the
                    // stop just after, at and just before the start.
                    let starts = if len <= 40 { 0..=len.min(18) } else { 0..=1 };
                    for start in starts
                        .chain([17, at.saturating_sub(1), at, at + 1])
                        .filter(|&s| s <= len)
                    {
                        check_all(&buf, start);
                    }
                    if len > 3 {
                        buf[len / 3] = 0xc3;
                        for start in [0, 1, len / 3, len / 3 + 1, len / 2] {
                            check_all(&buf, start.min(len));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn trusted_kernel_past_its_avx2_switch() {
        // The trusted kernel moves to AVX2 after 272 bytes: a quote or a
        // backslash at every position of buffers long enough to reach it
        // and its tail, from starts that shift the 64-byte steps; control
        // and non-ASCII bytes around are content to it.
        let mut buf = Vec::new();
        for len in (0..420usize).step_by(7).chain(400..420) {
            for at in (0..len).chain([len]) {
                for stop in [b'"', b'\\'] {
                    buf.clear();
                    buf.extend((0..len).map(|i| [b'a', 0x01, 0xc3, b'\n'][i % 4]));
                    if at < len {
                        buf[at] = stop;
                    }
                    for start in [0, 1, 15, 17, 63, at.saturating_sub(3)] {
                        let start = start.min(len);
                        let want = naive::find_quote_or_backslash(&buf, start);
                        assert_eq!(
                            find_quote_or_backslash(&buf, start),
                            want,
                            "{len} {at} {start}"
                        );
                        assert_eq!(swar::find_quote_or_backslash(&buf, start), want);
                    }
                }
            }
        }
    }

    #[test]
    fn content_bytes_are_never_stops() {
        // Every byte from 0x20 to 0xff except the quote and backslash is
        // content; put each in every lane.
        for b in 0x20u8..=0xff {
            if b == b'"' || b == b'\\' {
                continue;
            }
            for len in [1, 15, 16, 17, 31, 32, 33, 64, 65, 130] {
                let buf = vec![b; len];
                check_all(&buf, 0);
                let mut with_end = buf.clone();
                with_end.push(b'"');
                check_all(&with_end, 0);
                check_all(&with_end, len / 2);
            }
        }
    }

    #[test]
    fn pseudo_random_buffers() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let len = (next() % 300) as usize;
            // Mostly plain content, with rare stops and non-ASCII bytes.
            let buf: Vec<u8> = (0..len)
                .map(|_| match next() % 97 {
                    0 => b'"',
                    1 => b'\\',
                    2 => (next() % 0x20) as u8,
                    3 | 4 => 0x80 | (next() as u8),
                    _ => b'0' + (next() % 40) as u8,
                })
                .collect();
            let start = if len == 0 {
                0
            } else {
                (next() as usize) % (len + 1)
            };
            check_all(&buf, start);
        }
    }
}
