//! One byte at a time: the reference every backend is tested against, and the
//! tail loop of the vector backends.

use super::Stop;

#[inline]
pub(crate) fn find_string_stop(buf: &[u8], start: usize) -> Stop {
    let mut non_ascii = false;
    for (i, &b) in buf.iter().enumerate().skip(start) {
        if b == b'"' || b == b'\\' || b < 0x20 {
            return Stop { at: i, non_ascii };
        }
        non_ascii |= b >= 0x80;
    }
    Stop {
        at: buf.len(),
        non_ascii,
    }
}

/// The first `"`, `\`, control byte or byte >= 0x80 at or after `start`.
#[inline]
pub(crate) fn find_ascii_stop(buf: &[u8], start: usize) -> usize {
    buf.iter()
        .skip(start)
        .position(|&b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b))
        .map_or(buf.len(), |i| start + i)
}

/// The first `"` or `\` at or after `start`, or `buf.len()`.
#[inline]
pub(crate) fn find_quote_or_backslash(buf: &[u8], start: usize) -> usize {
    buf.iter()
        .skip(start)
        .position(|&b| b == b'"' || b == b'\\')
        .map_or(buf.len(), |i| start + i)
}
