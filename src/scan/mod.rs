//! Layer 1: byte-level JSON grammar over `&[u8]`.
//!
//! Two families of functions live here:
//!
//! * *validating* (`scan_*`, [`skip_value`]): accept exactly what RFC 8259
//!   accepts (what `serde_json::from_slice::<&RawValue>` accepts), UTF-8
//!   included, and report the first error with its byte offset;
//! * *trusted* (`*_trusted`): walk input that a validating function already
//!   accepted, as fast as possible. They never panic or read out of bounds on
//!   any input, but on invalid input their answer is meaningless.
//!
//! Positions are indices into the whole message, so every error offset is an
//! offset in the message.

pub(crate) mod arch;
mod number_run;

use crate::error::{Error, ErrorKind};

/// The maximum nesting depth the scanner can track.
pub(crate) const MAX_DEPTH_LIMIT: u32 = 1024;

#[inline(always)]
pub(crate) fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// How much of a message [`prefetch`] asks for: a page, the whole of
/// nearly every single message (an `eth_call` with its data, an MCP tool
/// result, an upstream's reply). Past 512 bytes the CPU's own prefetcher
/// was trusted to keep ahead, and on an AVX-512 AMD EPYC (Zen 5 class) it
/// did not: the scattered corpora's lines still came one after the other
/// (medians against the fastest peer, 512 -> 4096 bytes, three
/// alternated runs: `parse/eth_singles` 2.01x-2.07x -> 2.65x-2.72x,
/// `parse/mcp` 1.56x-1.65x -> 2.02x-2.06x, `response/eth_responses`
/// 1.35x-1.36x -> 1.89x-1.93x, the stream layout level; 1,024 bytes got
/// most of it, 8 and 16 KiB no more). Past a page the message is read in
/// address order, which that prefetcher follows, and more lines in
/// flight would only queue.
#[cfg(all(target_arch = "x86_64", not(miri)))]
const PREFETCH_BYTES: usize = 4096;

/// What [`prefetch`] is given of a stream's buffer read as a prefix
/// ([`Parser::parse_prefix`](crate::Parser::parse_prefix)): as much as
/// before session 44.
pub(crate) const PREFIX_PREFETCH_BYTES: usize = 512;

/// Asks the CPU to start loading the cache lines of `input`'s first
/// [`PREFETCH_BYTES`] now, all at once. The parser's reads depend on each
/// other (where one value ends says where the next read goes), so a message
/// that is not in the cache (a gateway's stream of distinct messages) would
/// otherwise wait for its lines one after the other.
#[inline(always)]
pub(crate) fn prefetch(input: &[u8]) {
    // Miri has nothing to prefetch into.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let end = input.len().min(PREFETCH_BYTES);
        let mut at = 64;
        while at < end {
            // SAFETY: a prefetch is a hint: it reads nothing the program
            // sees and never faults; the address is inside `input` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(input.as_ptr().add(at).cast()) };
            at += 64;
        }
        if end > 0 {
            // The line holding the last byte, when `input` does not start
            // on a line boundary.
            // SAFETY: as above; `end - 1` is inside `input`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(input.as_ptr().add(end - 1).cast()) };
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = input;
}

/// Index of the first non-whitespace byte at or after `pos`.
#[inline(always)]
pub(crate) fn skip_ws(buf: &[u8], mut pos: usize) -> usize {
    // Compact JSON has no whitespace at all: make that the one-compare path.
    match buf.get(pos) {
        Some(&b) if b > b' ' => pos,
        _ => {
            while let Some(&b) = buf.get(pos) {
                if !is_ws(b) {
                    break;
                }
                pos += 1;
            }
            pos
        }
    }
}

#[inline(always)]
pub(crate) fn err<T>(kind: ErrorKind, at: usize) -> Result<T, Error> {
    Err(Error::new(kind, at))
}

#[cold]
pub(crate) fn eof<T>(buf: &[u8]) -> Result<T, Error> {
    err(ErrorKind::Eof, buf.len())
}

/// A string whose opening quote has been read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScannedStr {
    /// Index just past the closing quote.
    pub end: usize,
    /// Whether the string contains a backslash escape.
    pub escaped: bool,
}

/// Validates the string whose content starts at `pos` (just after the opening
/// quote): escapes, no raw control bytes, UTF-8.
///
/// ASCII content goes through the ASCII kernel, which stops at the first
/// byte >= 0x80 or backslash; the rest of such a string (free text, with
/// escapes or non-ASCII characters) is finished by [`scan_text`].
#[inline(always)]
pub(crate) fn scan_string(buf: &[u8], pos: usize) -> Result<ScannedStr, Error> {
    let at = arch::find_ascii_stop(buf, pos);
    match buf.get(at) {
        Some(b'"') => Ok(ScannedStr {
            end: at + 1,
            escaped: false,
        }),
        // Everything before `at` is ASCII: UTF-8 is checked from there.
        Some(&b) if b == b'\\' || b >= 0x80 => scan_text(buf, at, at, false, false),
        Some(_) => err(ErrorKind::ControlCharacter, at),
        None => eof(buf),
    }
}

/// The rest of a string from `pos`, which is at an escape or a non-ASCII
/// byte or after them: escapes are checked as they come, and the content
/// from `from` on is validated as UTF-8 once the string ends (or before any
/// error is reported, so that the first error in the input is the one
/// reported). `escaped` and `non_ascii` say what the string held before
/// `pos` (`non_ascii` from `from` on).
///
/// With AVX2, the content is classified 32 bytes at a time, every
/// escape in a block is handled from the block's masks and UTF-8 is
/// checked block by block as it goes; otherwise (and for the last bytes
/// of the input) by [`scan_text_portable`].
#[inline(never)]
pub(crate) fn scan_text(
    buf: &[u8],
    from: usize,
    pos: usize,
    escaped: bool,
    non_ascii: bool,
) -> Result<ScannedStr, Error> {
    #[cfg(target_arch = "x86_64")]
    if arch::avx2_available() {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { arch::scan_text_avx2(buf, from, pos, escaped, non_ascii) };
    }
    scan_text_portable(buf, from, pos, escaped, non_ascii)
}

/// [`scan_text`] with the stop kernel: runs are scanned with the kernel that
/// passes non-ASCII bytes, from one escape to the next.
pub(crate) fn scan_text_portable(
    buf: &[u8],
    from: usize,
    mut pos: usize,
    mut escaped: bool,
    mut non_ascii: bool,
) -> Result<ScannedStr, Error> {
    loop {
        let stop = arch::find_string_stop(buf, pos);
        non_ascii |= stop.non_ascii;
        let next = buf.get(stop.at);
        let escape = match next {
            Some(b'\\') => Some(scan_escape(buf, stop.at)),
            _ => None,
        };
        if let Some(Ok(after)) = escape {
            escaped = true;
            pos = after;
            continue;
        }
        if non_ascii {
            validate_utf8(buf, from, stop.at)?;
        }
        return match (next, escape) {
            (Some(b'"'), _) => Ok(ScannedStr {
                end: stop.at + 1,
                escaped,
            }),
            (_, Some(Err(e))) => Err(e),
            (Some(_), _) => err(ErrorKind::ControlCharacter, stop.at),
            (None, _) => eof(buf),
        };
    }
}

/// String content may hold multi-byte UTF-8; escapes are ASCII, so checking
/// the content with its escapes checks the runs between them (a sequence
/// cut by a backslash is invalid either way).
pub(crate) fn validate_utf8(buf: &[u8], from: usize, to: usize) -> Result<(), Error> {
    // The fast check says only yes or no; std's finds where and why.
    if simdutf8::basic::from_utf8(&buf[from..to]).is_ok() {
        return Ok(());
    }
    match core::str::from_utf8(&buf[from..to]) {
        Ok(_) => Ok(()),
        // A sequence cut off by the end of the input is a truncated message,
        // not an invalid one: prefix parsing must say "need more".
        Err(e) if to == buf.len() && e.error_len().is_none() => eof(buf),
        Err(e) => err(ErrorKind::InvalidUtf8, from + e.valid_up_to()),
    }
}

/// Validates the escape whose backslash is at `pos`; returns the index after it.
#[inline]
pub(crate) fn scan_escape(buf: &[u8], pos: usize) -> Result<usize, Error> {
    match buf.get(pos + 1) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(pos + 2),
        Some(b'u') => {
            let Some(hex) = buf.get(pos + 2..pos + 6) else {
                // Distinguish a truncated escape from a bad one, as serde_json.
                return match buf[pos + 2..].iter().position(|b| !b.is_ascii_hexdigit()) {
                    Some(i) => err(ErrorKind::InvalidEscape, pos + 2 + i),
                    None => eof(buf),
                };
            };
            match hex.iter().position(|b| !b.is_ascii_hexdigit()) {
                None => Ok(pos + 6),
                Some(i) => err(ErrorKind::InvalidEscape, pos + 2 + i),
            }
        }
        Some(_) => err(ErrorKind::InvalidEscape, pos + 1),
        None => eof(buf),
    }
}

#[inline(always)]
fn is_digit(b: Option<&u8>) -> bool {
    matches!(b, Some(b'0'..=b'9'))
}

/// The index of the first byte at or after `pos` that is not an ASCII
/// digit. Numbers (ids, counts, tokens) are a few digits of varying length:
/// eight bytes are classified at once, so the end is found without a loop
/// whose exit depends on the length.
#[inline(always)]
pub(crate) fn skip_digits(buf: &[u8], mut pos: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    while let Some(word) = buf.get(pos..pos + 8) {
        // Per byte, `x = b ^ b'0'` is below 10 exactly for digits: then
        // neither `x` nor `(x & 0x7f) + 0x76` (which cannot carry into the
        // next byte) has its top bit set.
        let x = u64::from_le_bytes(word.try_into().unwrap()) ^ (ONES * b'0' as u64);
        let not_digit = (((x & (ONES * 0x7f)) + ONES * 0x76) | x) & (ONES * 0x80);
        if not_digit != 0 {
            return pos + (not_digit.trailing_zeros() / 8) as usize;
        }
        pos += 8;
    }
    while is_digit(buf.get(pos)) {
        pos += 1;
    }
    pos
}

/// Validates the number starting at `pos` (a `-` or a digit); returns the index
/// after it. What follows the number is the caller's to check.
#[inline(always)]
pub(crate) fn scan_number(buf: &[u8], pos: usize) -> Result<usize, Error> {
    scan_numbers(buf, pos, false)
}

/// [`scan_number`], and with `run` (inside an array) the numbers that
/// follow it as further elements (`,` and at most one space before each):
/// embedding vectors, coordinates and byte arrays go from one number to the
/// next without [`skip_value`]'s turnaround. Returns the index after the
/// last number taken; what follows is the caller's to check.
#[inline(always)]
fn scan_numbers(buf: &[u8], pos: usize, run: bool) -> Result<usize, Error> {
    match number_run_end(buf, pos, run) {
        Ok(end) => Ok(end),
        Err(at) => number_error(buf, at),
    }
}

/// The grammar of [`scan_numbers`]: the index after the numbers, or the
/// index of the byte that breaks one (the input's length if it is cut
/// short).
///
/// Not inlined: numbers are rare inside Ethereum params (hex strings), and
/// keeping the number grammar out of [`skip_value`]'s loop leaves its
/// registers to the loop state. Its result fits two registers (an `Error`
/// would be returned through memory); the caller's cold path builds the
/// error.
///
/// In a run, after its first two numbers (arrays of one or two numbers
/// never pay for it), whole windows of numbers are taken by
/// [`number_run::validated_to_comma`] where the CPU has a classifier; what
/// it leaves (an exponent, the last number before the `]`) is taken here,
/// and the masks are tried again after it (after eight numbers if they
/// took nothing).
#[inline(never)]
fn number_run_end(buf: &[u8], pos: usize, run: bool) -> Result<usize, usize> {
    number_run_end_in(buf, pos, run, true)
}

/// [`number_run_end`], with the masks or (tests' reference) without.
#[inline(always)]
fn number_run_end_in(buf: &[u8], mut pos: usize, run: bool, masks: bool) -> Result<usize, usize> {
    let mut before_masks: u32 = 2;
    loop {
        if run && masks {
            if before_masks == 0 {
                before_masks = 8;
                if let Some(comma) = number_run::validated_to_comma(buf, pos) {
                    before_masks = 0;
                    let next = comma + 1 + (buf.get(comma + 1) == Some(&b' ')) as usize;
                    if !matches!(buf.get(next), Some(b'-' | b'0'..=b'9')) {
                        return Ok(comma);
                    }
                    pos = next;
                }
            } else {
                before_masks -= 1;
            }
        }
        pos += (buf.get(pos) == Some(&b'-')) as usize;
        match buf.get(pos) {
            Some(b'0') => pos += 1,
            Some(b'1'..=b'9') => pos = skip_digits(buf, pos + 1),
            _ => return Err(pos),
        }
        if buf.get(pos) == Some(&b'.') {
            if !is_digit(buf.get(pos + 1)) {
                return Err(pos + 1);
            }
            pos = skip_digits(buf, pos + 2);
        }
        if matches!(buf.get(pos), Some(b'e' | b'E')) {
            pos += 1;
            pos += matches!(buf.get(pos), Some(b'+' | b'-')) as usize;
            if !is_digit(buf.get(pos)) {
                return Err(pos);
            }
            pos = skip_digits(buf, pos + 1);
        }
        if !run || buf.get(pos) != Some(&b',') {
            return Ok(pos);
        }
        let next = pos + 1 + (buf.get(pos + 1) == Some(&b' ')) as usize;
        if !matches!(buf.get(next), Some(b'-' | b'0'..=b'9')) {
            return Ok(pos);
        }
        pos = next;
    }
}

#[cold]
fn number_error<T>(buf: &[u8], pos: usize) -> Result<T, Error> {
    if pos >= buf.len() {
        eof(buf)
    } else {
        err(ErrorKind::InvalidNumber, pos)
    }
}

/// Validates the literal `lit` (`true`, `false`, `null`) at `pos`.
#[inline(always)]
pub(crate) fn scan_literal(buf: &[u8], pos: usize, lit: &'static [u8]) -> Result<usize, Error> {
    if buf.get(pos..pos + lit.len()) == Some(lit) {
        return Ok(pos + lit.len());
    }
    literal_error(buf, pos, lit)
}

#[cold]
fn literal_error<T>(buf: &[u8], pos: usize, lit: &[u8]) -> Result<T, Error> {
    let have = &buf[pos..];
    let same = have.iter().zip(lit).take_while(|(a, b)| a == b).count();
    if same == have.len() {
        eof(buf)
    } else {
        err(ErrorKind::InvalidLiteral, pos + same)
    }
}

/// Reads `"key" :` with the key's opening quote at `pos`; returns the index of
/// the member's value (whitespace skipped).
#[inline(always)]
fn scan_key_and_colon(buf: &[u8], pos: usize) -> Result<usize, Error> {
    let pos = skip_ws(buf, scan_string(buf, pos + 1)?.end);
    match buf.get(pos) {
        Some(b':') => Ok(skip_ws(buf, pos + 1)),
        Some(_) => err(ErrorKind::ExpectedColon, pos),
        None => eof(buf),
    }
}

/// Validates the JSON value starting at `pos` (whitespace already skipped);
/// returns the index just after it.
///
/// `depth` is the number of containers already open around the value; a
/// container that would make it exceed `max_depth` is an error.
///
/// The kind of each open container (array or object) is one bit of a `u64`
/// kept in a register; a value nested 64 levels below the start is validated
/// by a recursive call, so the stack of kinds never needs memory and the
/// recursion is at most `MAX_DEPTH_LIMIT / 64` calls deep.
pub(crate) fn skip_value(
    buf: &[u8],
    mut pos: usize,
    depth: u32,
    max_depth: u32,
) -> Result<usize, Error> {
    // Bit `i` is set if the container open at level `i` is an array.
    let mut kinds: u64 = 0;
    // Containers opened by this call; `depth + level` is the absolute depth.
    let mut level: u32 = 0;
    'value: loop {
        let Some(&b) = buf.get(pos) else {
            return eof(buf);
        };
        // A string first (most values of Ethereum's params), then the
        // containers, then the rest: conditional branches, where one
        // `match` on the first byte was a jump table, an indirect branch
        // per value that the mix of strings, objects and numbers kept
        // mispredicting.
        if b == b'"' {
            pos = scan_string(buf, pos + 1)?.end;
            // Runs of strings are most of Ethereum's params (addresses,
            // hashes, calldata, block tags): in compact JSON (or with
            // one space after separators), go from one to the next
            // without the general loop's turnaround.
            if level > 0 {
                let is_array = kinds >> (level - 1) & 1 == 1;
                loop {
                    // `,"` (compact) or `, "` (web3.py's separators).
                    if buf.get(pos) != Some(&b',') {
                        break;
                    }
                    let next = if buf.get(pos + 1) == Some(&b' ') {
                        pos + 2
                    } else {
                        pos + 1
                    };
                    if buf.get(next) != Some(&b'"') {
                        break;
                    }
                    pos = scan_string(buf, next + 1)?.end;
                    if !is_array {
                        // That was a member name: its value follows.
                        pos = skip_ws(buf, pos);
                        match buf.get(pos) {
                            Some(b':') => pos = skip_ws(buf, pos + 1),
                            Some(_) => return err(ErrorKind::ExpectedColon, pos),
                            None => return eof(buf),
                        }
                        if buf.get(pos) != Some(&b'"') {
                            continue 'value;
                        }
                        pos = scan_string(buf, pos + 1)?.end;
                    }
                }
            }
        } else if b | 0x20 == b'{' {
            // `{` or `[` (`| 0x20` maps `[` to `{`, no other byte).
            if level == 64 {
                pos = skip_value(buf, pos, depth + level, max_depth)?;
            } else {
                if depth + level >= max_depth {
                    return err(ErrorKind::TooDeep { limit: max_depth }, pos);
                }
                let is_array = b == b'[';
                kinds = (kinds & !(1 << level)) | ((is_array as u64) << level);
                level += 1;
                pos = skip_ws(buf, pos + 1);
                match buf.get(pos) {
                    Some(b']') if is_array => {
                        level -= 1;
                        pos += 1;
                    }
                    Some(b'}') if !is_array => {
                        level -= 1;
                        pos += 1;
                    }
                    Some(_) if is_array => continue 'value,
                    Some(b'"') => {
                        pos = scan_key_and_colon(buf, pos)?;
                        continue 'value;
                    }
                    Some(_) => return err(ErrorKind::ExpectedKey, pos),
                    None => return eof(buf),
                }
            }
        } else {
            match b {
                b'-' | b'0'..=b'9' => {
                    // In an array (branch-free: `&`, not `&&`).
                    let in_array = (level != 0) & (kinds >> (level.wrapping_sub(1) & 63) & 1 == 1);
                    pos = scan_numbers(buf, pos, in_array)?;
                }
                b't' => pos = scan_literal(buf, pos, b"true")?,
                b'f' => pos = scan_literal(buf, pos, b"false")?,
                b'n' => pos = scan_literal(buf, pos, b"null")?,
                _ => return err(ErrorKind::ExpectedValue, pos),
            }
        }
        // A value just ended: close containers until one continues.
        loop {
            if level == 0 {
                return Ok(pos);
            }
            pos = skip_ws(buf, pos);
            let is_array = kinds >> (level - 1) & 1 == 1;
            match buf.get(pos) {
                Some(b',') => {
                    pos = skip_ws(buf, pos + 1);
                    if !is_array {
                        match buf.get(pos) {
                            Some(b'"') => pos = scan_key_and_colon(buf, pos)?,
                            Some(_) => return err(ErrorKind::ExpectedKey, pos),
                            None => return eof(buf),
                        }
                    }
                    continue 'value;
                }
                Some(b']') if is_array => {
                    level -= 1;
                    pos += 1;
                }
                Some(b'}') if !is_array => {
                    level -= 1;
                    pos += 1;
                }
                Some(_) if is_array => return err(ErrorKind::ExpectedArrayCommaOrEnd, pos),
                Some(_) => return err(ErrorKind::ExpectedObjectCommaOrEnd, pos),
                None => return eof(buf),
            }
        }
    }
}

/// Whether `bytes` is exactly one JSON value (RFC 8259), whitespace
/// around it allowed, nested at most [`MAX_DEPTH_LIMIT`] deep: the check
/// of JSON a caller hands over as text (an error's data, a raw error
/// object, a raw result in debug builds).
pub(crate) fn is_one_value(bytes: &[u8]) -> bool {
    let start = skip_ws(bytes, 0);
    match skip_value(bytes, start, 0, MAX_DEPTH_LIMIT) {
        Ok(end) => skip_ws(bytes, end) == bytes.len(),
        Err(_) => false,
    }
}

/// Index just past the closing quote of the validated string whose content
/// starts at `pos`.
#[inline(always)]
pub(crate) fn skip_string_trusted(buf: &[u8], pos: usize) -> usize {
    skip_string_trusted_escaped(buf, pos).0
}

/// [`skip_string_trusted`], also saying whether the string has escapes
/// (member names, whose readers compare them plainly when it has none).
#[inline(always)]
pub(crate) fn skip_string_trusted_escaped(buf: &[u8], mut pos: usize) -> (usize, bool) {
    let mut escaped = false;
    loop {
        let at = arch::find_quote_or_backslash(buf, pos);
        match buf.get(at) {
            Some(b'"') => return (at + 1, escaped),
            // Skip the escaped byte; for `\u` the four hex digits are plain
            // content for the next scan.
            Some(_) => {
                escaped = true;
                pos = at + 2;
            }
            None => return (buf.len(), escaped),
        }
        if pos >= buf.len() {
            return (buf.len(), escaped);
        }
    }
}

/// Index just past the validated value starting at `pos`.
#[inline]
pub(crate) fn skip_value_trusted(buf: &[u8], mut pos: usize) -> usize {
    match buf.get(pos) {
        Some(b'"') => skip_string_trusted(buf, pos + 1),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            while let Some(&b) = buf.get(pos) {
                if b == b'"' {
                    pos = skip_string_trusted(buf, pos + 1);
                    continue;
                }
                // Compares, not a `match`: five cases became a jump table,
                // an indirect branch taken once per byte between strings
                // that the byte sequence kept mispredicting. `| 0x20`
                // maps `[` to `{` and `]` to `}`, and no other byte to
                // either.
                let folded = b | 0x20;
                if folded == b'{' {
                    depth += 1;
                } else if folded == b'}' {
                    depth -= 1;
                    if depth == 0 {
                        return pos + 1;
                    }
                }
                pos += 1;
            }
            buf.len()
        }
        Some(_) => {
            // A number or literal: it ends at a delimiter.
            while let Some(&b) = buf.get(pos) {
                if matches!(b, b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t') {
                    break;
                }
                pos += 1;
            }
            pos
        }
        None => pos,
    }
}

/// Views bytes that a validating scan accepted as UTF-8 as a `&str`.
#[inline(always)]
pub(crate) fn validated_str(bytes: &[u8]) -> &str {
    debug_assert!(core::str::from_utf8(bytes).is_ok());
    // SAFETY: every caller passes a sub-slice of input accepted by the
    // validating scanner, which checks every string for UTF-8 and accepts
    // only ASCII outside strings; sub-slices are cut at ASCII bytes (quotes,
    // structural characters, whitespace), never inside a multi-byte sequence.
    // The fuzz targets check this against `core::str::from_utf8`.
    unsafe { core::str::from_utf8_unchecked(bytes) }
}

/// Decodes the escapes of validated string content (between the quotes).
///
/// Fails on an unpaired surrogate escape (`"\ud800"`), which JSON's grammar
/// allows but which no `&str` can hold.
pub(crate) fn unescape(content: &[u8], out: &mut impl Extend<u8>) -> Result<(), usize> {
    let mut decoder = Unescaped::new(content);
    let mut chunk = [0u8; 4];
    while let Some(piece) = decoder.next_piece(&mut chunk) {
        out.extend(piece?.iter().copied());
    }
    Ok(())
}

/// The length of validated string content once its escapes are decoded,
/// or where its first unpaired surrogate escape starts.
pub(crate) fn unescaped_len(content: &[u8]) -> Result<usize, usize> {
    let mut decoder = Unescaped::new(content);
    let mut chunk = [0u8; 4];
    let mut len = 0;
    while let Some(piece) = decoder.next_piece(&mut chunk) {
        len += piece?.len();
    }
    Ok(len)
}

/// Compares validated string content to `want` as decoded text, without
/// allocating.
pub(crate) fn unescaped_eq(content: &[u8], escaped: bool, want: &[u8]) -> bool {
    if !escaped {
        return content == want;
    }
    let mut decoder = Unescaped::new(content);
    let mut chunk = [0u8; 4];
    let mut rest = want;
    while let Some(piece) = decoder.next_piece(&mut chunk) {
        let Ok(piece) = piece else { return false };
        match rest.strip_prefix(piece) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

/// Walks validated string content as runs of decoded bytes.
struct Unescaped<'a> {
    content: &'a [u8],
    pos: usize,
}

impl<'a> Unescaped<'a> {
    fn new(content: &'a [u8]) -> Self {
        Unescaped { content, pos: 0 }
    }

    /// The next run of plain bytes, or one decoded escape (in `chunk`); an
    /// unpaired surrogate is `Err(offset in content)`.
    fn next_piece<'c>(&mut self, chunk: &'c mut [u8; 4]) -> Option<Result<&'c [u8], usize>>
    where
        'a: 'c,
    {
        let s = self.content;
        let start = self.pos;
        if start >= s.len() {
            return None;
        }
        if s[start] != b'\\' {
            let end = memchr::memchr(b'\\', &s[start..]).map_or(s.len(), |i| start + i);
            self.pos = end;
            return Some(Ok(&s[start..end]));
        }
        let byte = match s.get(start + 1) {
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => {
                let first = hex4(s, start + 2);
                let mut end = start + 6;
                let code = match first {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed by `\u` + a low one.
                        let low = if s.get(end) == Some(&b'\\') && s.get(end + 1) == Some(&b'u') {
                            hex4(s, end + 2)
                        } else {
                            0
                        };
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            self.pos = s.len();
                            return Some(Err(start));
                        }
                        end += 6;
                        0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00)
                    }
                    0xDC00..=0xDFFF => {
                        self.pos = s.len();
                        return Some(Err(start));
                    }
                    c => c,
                };
                self.pos = end;
                let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                return Some(Ok(c.encode_utf8(chunk).as_bytes()));
            }
            Some(&other) => other, // `"`, `\` and `/` stand for themselves.
            None => {
                self.pos = s.len();
                return Some(Err(start));
            }
        };
        self.pos = start + 2;
        chunk[0] = byte;
        Some(Ok(&chunk[..1]))
    }
}

/// The value of the four hex digits at `pos` (validated input), or 0 if they
/// are missing.
fn hex4(s: &[u8], pos: usize) -> u32 {
    let Some(digits) = s.get(pos..pos + 4) else {
        return 0;
    };
    digits.iter().fold(0, |acc, &d| {
        acc << 4 | (d as char).to_digit(16).unwrap_or(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(input: &str) -> Result<usize, Error> {
        let buf = input.as_bytes();
        let pos = skip_ws(buf, 0);
        let end = skip_value(buf, pos, 0, 128)?;
        let rest = skip_ws(buf, end);
        if rest != buf.len() {
            return err(ErrorKind::TrailingCharacters, rest);
        }
        Ok(end)
    }

    #[test]
    fn skip_digits_agrees_with_a_byte_loop() {
        let naive = |input: &[u8], from: usize| {
            from + input[from..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count()
        };
        // Every byte value as the stop, after runs of every length up to
        // three words, with and without bytes after it.
        for stop in 0..=255u8 {
            for run in 0..25 {
                for tail in [0, 1, 9] {
                    let mut input = b"{\"id\":".to_vec();
                    let from = input.len();
                    input.extend((0..run).map(|i| b'0' + (i * 7 % 10) as u8));
                    input.push(stop);
                    input.extend(std::iter::repeat_n(b'5', tail));
                    assert_eq!(
                        super::skip_digits(&input, from),
                        naive(&input, from),
                        "stop {stop:#x}, run {run}, tail {tail}"
                    );
                }
            }
        }
    }

    #[test]
    fn accepts_what_rfc_8259_accepts() {
        for ok in [
            "0",
            "-0",
            "1",
            "-1",
            "10",
            "1.5",
            "-1.5e10",
            "1E+2",
            "1e-2",
            "0.0",
            "123456789012345678901234567890",
            "true",
            "false",
            "null",
            "\"\"",
            "\"a\"",
            "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
            "\"\\u00e9\\uD83D\\ude00\"",
            "\"\\ud800\"",
            "\"é東😀\"",
            "[]",
            "{}",
            "[1,2,3]",
            "[0.5,-1,2e3, 4,-0.25E-2,  5,\n6 ,7]",
            "[[1,2],[3,-4.5]]",
            "[1,\"a\",2,true,3]",
            "{\"a\":1,\"b\":[{},[]]}",
            " \t\r\n[ 1 , { \"a\" : null } ] \n",
        ] {
            assert!(
                value(ok).is_ok(),
                "{ok:?} should be accepted: {:?}",
                value(ok)
            );
        }
    }

    #[test]
    fn rejects_with_offsets() {
        let table: &[(&str, &str)] = &[
            ("", "unexpected end of input at byte 0"),
            ("01", "trailing characters after the JSON value at byte 1"),
            ("-", "unexpected end of input at byte 1"),
            ("-a", "invalid number at byte 1"),
            ("1.", "unexpected end of input at byte 2"),
            ("1.e3", "invalid number at byte 2"),
            ("1e", "unexpected end of input at byte 2"),
            ("1e+", "unexpected end of input at byte 3"),
            (".5", "expected a JSON value at byte 0"),
            ("+1", "expected a JSON value at byte 0"),
            ("tru", "unexpected end of input at byte 3"),
            ("trux", "invalid literal at byte 3"),
            ("nul", "unexpected end of input at byte 3"),
            ("\"abc", "unexpected end of input at byte 4"),
            ("\"a\u{1}b\"", "control character in string at byte 2"),
            ("\"\\x\"", "invalid escape in string at byte 2"),
            ("\"\\u12G4\"", "invalid escape in string at byte 5"),
            ("\"\\u12", "unexpected end of input at byte 5"),
            ("[1,]", "expected a JSON value at byte 3"),
            ("[1 2]", "expected ',' or ']' at byte 3"),
            ("{\"a\" 1}", "expected ':' at byte 5"),
            ("{\"a\":1,}", "expected a member name at byte 7"),
            ("{1:2}", "expected a member name at byte 1"),
            ("{\"a\":1]", "expected ',' or '}' at byte 6"),
            ("[", "unexpected end of input at byte 1"),
            ("[1,2", "unexpected end of input at byte 4"),
            // Runs of numbers in arrays keep the same errors and offsets.
            ("[1,2,]", "expected a JSON value at byte 5"),
            ("[1, 2,-]", "invalid number at byte 7"),
            ("[1,-", "unexpected end of input at byte 4"),
            ("[1,01]", "expected ',' or ']' at byte 4"),
            ("[1,2.]", "invalid number at byte 5"),
            ("[1,2e", "unexpected end of input at byte 5"),
            ("[1,2 3]", "expected ',' or ']' at byte 5"),
            ("[1,  2,x]", "expected a JSON value at byte 7"),
            ("{\"a\":1,2}", "expected a member name at byte 7"),
            ("{\"a\":[1],2}", "expected a member name at byte 9"),
            ("1 2", "trailing characters after the JSON value at byte 2"),
            ("\u{c}1", "expected a JSON value at byte 0"),
        ];
        for (input, want) in table {
            let got = value(input).expect_err(input).to_string();
            assert_eq!(&got, want, "input {input:?}");
        }
    }

    #[test]
    fn rejects_invalid_utf8_in_strings() {
        for (bytes, at) in [
            (&b"\"\xff\""[..], 1),
            (b"\"ab\xc3\"", 3),
            (b"\"\xed\xa0\x80\"", 1), // an encoded surrogate
            (b"\"ok \\n \xe6\x9d\"", 7),
        ] {
            let e = skip_value(bytes, 0, 0, 128).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidUtf8, "{bytes:?}");
            assert_eq!(e.offset(), at, "{bytes:?}");
        }
        let long = [
            b"\"".as_ref(),
            &[b'a'; 100],
            b"\xe2\x82\xac",
            &[b'b'; 100],
            b"\"",
        ]
        .concat();
        assert!(skip_value(&long, 0, 0, 128).is_ok());
        let mut bad = long.clone();
        bad[101] = b'x';
        assert_eq!(skip_value(&bad, 0, 0, 128).unwrap_err().offset(), 102);
    }

    /// Long strings are checked in one piece, escapes included, by the
    /// vector validator: the first error in the input is still the one
    /// reported, at its byte, and a sequence cut off by the end of the
    /// input still means "need more".
    #[test]
    fn long_non_ascii_strings_report_the_first_error_where_it_is() {
        let text = "Adèle écrit «bonjour» à 東京 😀 ".repeat(8);
        let ok = format!("\"{text}\\n{text}\\u00e8{text}\"");
        assert_eq!(skip_value(ok.as_bytes(), 0, 0, 128), Ok(ok.len()));
        let at = |e: Error| (e.kind(), e.offset());
        // A bad byte after two escapes, far past the first vector.
        let mut bad = ok.clone().into_bytes();
        let far = bad.len() - 10;
        bad[far] = 0xff;
        assert_eq!(
            at(skip_value(&bad, 0, 0, 128).unwrap_err()),
            (ErrorKind::InvalidUtf8, far)
        );
        // A bad escape after invalid UTF-8: the UTF-8 error comes first.
        let mut both = ok.clone().into_bytes();
        both[5] = 0xc3;
        both[6] = b'a';
        let escape = ok.find("\\n").unwrap();
        both[escape + 1] = b'q';
        assert_eq!(
            at(skip_value(&both, 0, 0, 128).unwrap_err()),
            (ErrorKind::InvalidUtf8, 5)
        );
        // Only the bad escape: it is reported.
        let mut escape_only = ok.clone().into_bytes();
        escape_only[escape + 1] = b'q';
        assert_eq!(
            at(skip_value(&escape_only, 0, 0, 128).unwrap_err()).0,
            ErrorKind::InvalidEscape
        );
        // A raw control byte after non-ASCII text.
        let mut control = ok.clone().into_bytes();
        control[far] = b'\n';
        assert_eq!(
            at(skip_value(&control, 0, 0, 128).unwrap_err()),
            (ErrorKind::ControlCharacter, far)
        );
        // Cut inside a four-byte sequence: incomplete, not invalid.
        let emoji = ok.find('😀').unwrap();
        let cut = &ok.as_bytes()[..emoji + 2];
        let e = skip_value(cut, 0, 0, 128).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Eof, "{e:?}");
    }

    /// The string scan's UTF-8 verdict against std's, for every sequence of
    /// three bytes (four after a four-byte lead) drawn from the bytes at the
    /// edges of UTF-8's ranges (leads, continuations, overlong forms,
    /// surrogates, past U+10FFFF, cut sequences), at each position of the
    /// first two 32-byte blocks of a string that starts with a non-ASCII
    /// character, after a `\u` escape that runs past a block or not.
    #[test]
    fn utf8_verdicts_agree_with_std_at_every_position() {
        const EDGES: [u8; 26] = [
            b'a', 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec,
            0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xf7, 0xf8, 0xfe, 0xff,
        ];
        let check = |head: &[u8], seq: &[u8]| {
            let mut msg = b"\"\xc3\xa9".to_vec();
            msg.extend_from_slice(head);
            msg.extend_from_slice(seq);
            msg.extend_from_slice(b"z\"");
            let content_end = msg.len() - 1;
            // Room after the string, so that the vector loop reads it whole.
            msg.extend_from_slice(&[b' '; 64]);
            let want = match core::str::from_utf8(&msg[1..content_end]) {
                Ok(_) => Ok(content_end + 1),
                Err(e) => Err((ErrorKind::InvalidUtf8, 1 + e.valid_up_to())),
            };
            let got = skip_value(&msg, 0, 0, 128).map_err(|e| (e.kind(), e.offset()));
            assert_eq!(got, want, "{:x?}", &msg[..content_end + 1]);
        };
        // The sequence at the first block's start, across its seam with
        // the second, and inside the second.
        let mut fillers: Vec<Vec<u8>> = [0, 1, 2, 26, 27, 28, 29, 30, 31, 35]
            .into_iter()
            .map(|k| vec![b'a'; k])
            .collect();
        // A `\u00e8` that ends past the first block, then the sequence.
        for k in 24..30 {
            let mut head = vec![b'a'; k];
            head.extend_from_slice(b"\\u00e8");
            fillers.push(head);
        }
        for head in &fillers {
            for &a in &EDGES {
                for &b in &EDGES {
                    for &c in &EDGES {
                        check(head, &[a, b, c]);
                    }
                }
            }
        }
        // Four-byte leads and what follows them, across the seam.
        for k in [28, 29] {
            let head = vec![b'a'; k];
            for &a in &EDGES[17..] {
                for &b in &EDGES {
                    for &c in &EDGES {
                        for &d in &EDGES {
                            check(&head, &[a, b, c, d]);
                        }
                    }
                }
            }
        }
    }

    /// The AVX2 text loop against the portable one (and the string scan's
    /// entry against both), on strings built from pieces that exercise it:
    /// escapes of every form (some cut or invalid) at every lane, multi-byte
    /// characters (some invalid or cut), control bytes, with and without the
    /// closing quote, cut at many places.
    #[test]
    fn text_loop_agrees_with_the_portable_loop() {
        // Valid pieces, and pieces of which a string gets at most one.
        let valid: &[&[u8]] = &[
            b"a",
            b"plain words ",
            b"0123456789abcdef0123456789abcdef",
            b"\\n",
            b"\\\"",
            b"\\\\",
            b"\\/",
            b"\\u00e9",
            b"\\uD83D\\uDE00",
            "\u{e8}".as_bytes(),
            "\u{6771}\u{4eac}".as_bytes(),
            "\u{1f600}".as_bytes(),
            "\u{7ff}\u{800}\u{fffd}\u{ffff}\u{10000}\u{10ffff}".as_bytes(),
        ];
        let broken: &[&[u8]] = &[
            b"\\u12",
            b"\\u12G4",
            b"\\x",
            b"\xc3",
            b"\xe6\x9d",
            b"\xf0\x9f\x98",
            b"\x80",
            b"\xbf\xbf",
            b"\xff",
            b"\xc0\xaf",
            b"\xc1\xbf",
            b"\xe0\x80\x80",
            b"\xe0\x9f\xbf",
            b"\xed\xa0\x80",
            b"\xed\xbf\xbf",
            b"\xf0\x80\x80\x80",
            b"\xf0\x8f\xbf\xbf",
            b"\xf4\x90\x80\x80",
            b"\xf5\x80\x80\x80",
            b"\xf8\x88\x80\x80\x80",
            "\u{e8}".as_bytes().split_at(1).0,
            b"\x01",
            b"\t",
            b"\"",
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let key = |r: Result<ScannedStr, Error>| {
            r.map(|s| (s.end, s.escaped))
                .map_err(|e| (e.kind(), e.offset()))
        };
        let mut buf = Vec::new();
        let prefixes: [&[u8]; 4] = [b"\"", b"[\"", b"{\"k\":\"", b"[1,\"a\",\"\xc3\xa9\", \""];
        for _ in 0..20_000 {
            // The string's opening quote ends the prefix (what precedes a
            // string in a message); its content starts at `start`.
            buf.clear();
            buf.extend_from_slice(prefixes[next() as usize % prefixes.len()]);
            let start = buf.len();
            // Valid pieces, so that strings run long, and in a third of
            // the strings one broken piece somewhere.
            let count = next() % 48;
            let broken_at = if next() % 3 == 0 {
                next() % (count + 1)
            } else {
                u64::MAX
            };
            for k in 0..=count {
                if k == broken_at {
                    buf.extend_from_slice(broken[next() as usize % broken.len()]);
                }
                if k < count {
                    buf.extend_from_slice(valid[next() as usize % valid.len()]);
                }
            }
            if next() % 4 != 0 {
                buf.push(b'"');
                // What may follow a string.
                buf.extend_from_slice(&b",\"\xc3\xa9\xe6\x9d\xb1\"]}"[..next() as usize % 11]);
            }
            let cuts = [
                buf.len(),
                buf.len() - 1,
                start + next() as usize % (buf.len() - start + 1),
            ];
            for cut in cuts {
                let input = &buf[..cut.max(start)];
                let want = key(scan_text_portable(input, start, start, false, false));
                assert_eq!(
                    key(scan_text(input, start, start, false, false)),
                    want,
                    "{input:?}"
                );
                assert_eq!(key(scan_string(input, start)), want, "{input:?}");
                // Resumed part-way, as after an ASCII run.
                let from = start + next() as usize % (input.len() - start + 1);
                let plain = |b: &u8| b.is_ascii() && *b != b'"' && *b != b'\\' && *b >= 0x20;
                if input[start..from].iter().all(plain) {
                    let want = key(scan_text_portable(input, from, from, false, false));
                    assert_eq!(
                        key(scan_text(input, from, from, false, false)),
                        want,
                        "{input:?} from {from}"
                    );
                }
            }
        }
    }

    /// Text dense with escapes (`\u` every six bytes, as Python's
    /// `json.dumps` writes non-ASCII text), at every alignment against the
    /// 32-byte blocks, then an escape the masks cannot vouch for (doubled,
    /// cut, bad) or an error: the block loop takes each block up to such a
    /// backslash and must agree with the portable loop on every verdict
    /// and offset.
    #[test]
    fn escape_dense_text_at_every_alignment() {
        let tails: &[&[u8]] = &[
            b"\"",
            b"\\\\x\"",
            b"\\\\\\\\\"",
            b"\\u00e9\"",
            b"\\uD83D\\uDE00\"",
            b"\\u12G4\"",
            b"\\x\"",
            b"\\",
            b"\\u00",
            b"\x01\"",
            b"\xc3\\n\"",
            b"\xe6\x9d\xb1\\n\"",
            b"\xe6\x9d\\n\"",
        ];
        let key = |r: Result<ScannedStr, Error>| {
            r.map(|s| (s.end, s.escaped))
                .map_err(|e| (e.kind(), e.offset()))
        };
        let mut buf = Vec::new();
        for lead in 0..40 {
            for escapes in [1, 5, 6, 11, 12] {
                for tail in tails {
                    for escape in [&b"\\u00e9"[..], b"\\n", "\u{e9}\\t".as_bytes()] {
                        buf.clear();
                        buf.push(b'"');
                        buf.extend(std::iter::repeat_n(b'a', lead));
                        for _ in 0..escapes {
                            buf.extend_from_slice(escape);
                        }
                        buf.extend_from_slice(tail);
                        buf.extend_from_slice(&[b' '; 40]);
                        let want = key(scan_text_portable(&buf, 1, 1, false, false));
                        assert_eq!(key(scan_text(&buf, 1, 1, false, false)), want, "{buf:?}");
                        assert_eq!(key(scan_string(&buf, 1)), want, "{buf:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn depth_limit_counts_containers() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(skip_value(nested(128).as_bytes(), 0, 0, 128).is_ok());
        let e = skip_value(nested(129).as_bytes(), 0, 0, 128).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooDeep { limit: 128 });
        assert_eq!(e.offset(), 128);
        // Depth already open around the value counts.
        assert!(skip_value(nested(126).as_bytes(), 0, 2, 128).is_ok());
        assert!(skip_value(nested(127).as_bytes(), 0, 2, 128).is_err());
        // Objects and arrays alike, and the limit holds past 64 levels.
        let deep = format!("{}1{}", "{\"a\":[".repeat(100), "]}".repeat(100));
        assert!(skip_value(deep.as_bytes(), 0, 0, 200).is_ok());
        assert!(skip_value(deep.as_bytes(), 0, 0, 199).is_err());
        let mismatched = format!("{}1{}]", "{\"a\":[".repeat(70), "]}".repeat(69));
        assert!(skip_value(mismatched.as_bytes(), 0, 0, 1024).is_err());
    }

    #[test]
    fn trusted_skip_agrees_with_validating_skip() {
        for input in [
            "\"a\\\"b\"",
            "\"\\\\\"",
            "123",
            "-1.5e3",
            "true",
            "null",
            "[1,[2,{\"a\":\"]\"}],3]",
            "{\"k\\\"\":\"}\"}",
            "{}",
            "[]",
            "[ 1 , 2 ]",
        ] {
            let buf = format!("{input} ,");
            let want = skip_value(buf.as_bytes(), 0, 0, 128).unwrap();
            assert_eq!(skip_value_trusted(buf.as_bytes(), 0), want, "{input}");
        }
    }

    #[test]
    fn unescapes() {
        let decode = |s: &str| {
            let mut out = Vec::new();
            unescape(s.as_bytes(), &mut out).map(|()| String::from_utf8(out).unwrap())
        };
        assert_eq!(
            decode(r#"a\"b\\c\/d\be\ff\ng\rh\ti"#).unwrap(),
            "a\"b\\c/d\u{8}e\u{c}f\ng\rh\ti"
        );
        assert_eq!(decode(r"\u006dethod").unwrap(), "method");
        assert_eq!(decode(r"\u00e9\u6771\ud83d\ude00").unwrap(), "é東😀");
        assert_eq!(decode(r"x\ud800"), Err(1));
        assert_eq!(decode(r"\udc00"), Err(0));
        assert_eq!(decode(r"\ud800\u0041"), Err(0));
        assert!(unescaped_eq(br"\u006dethod", true, b"method"));
        assert!(!unescaped_eq(br"\u006dethod", true, b"methods"));
        assert!(!unescaped_eq(br"\u006dethodx", true, b"method"));
        assert!(unescaped_eq(b"plain", false, b"plain"));
    }
}

/// The kernels next to an unreadable page: a read past the slice faults.
#[cfg(all(test, target_os = "linux"))]
mod at_page_edges {
    use super::*;
    use crate::guard_page::Guarded;

    /// A xorshift generator from `x` (not zero).
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Where a string whose content starts at `buf[pos]` ends (after its
    /// quote), byte by byte, or `Err` where `scan_string` must refuse it.
    fn string_end(buf: &[u8], pos: usize) -> Result<usize, ()> {
        let mut i = pos;
        loop {
            match buf.get(i) {
                None => return Err(()),
                Some(b'"') => break,
                Some(b'\\') => match buf.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'u') => {
                        let digits = buf.get(i + 2..i + 6).ok_or(())?;
                        if !digits.iter().all(u8::is_ascii_hexdigit) {
                            return Err(());
                        }
                        i += 6;
                    }
                    _ => return Err(()),
                },
                Some(&b) if b < 0x20 => return Err(()),
                Some(_) => i += 1,
            }
        }
        std::str::from_utf8(&buf[pos..i]).map_err(|_| ())?;
        Ok(i + 1)
    }

    /// Every kernel from every start; the string scanners' answers checked.
    fn every_kernel_from_every_start(buf: &[u8]) {
        for start in 0..=buf.len() {
            let _ = arch::find_string_stop(buf, start);
            let _ = arch::find_ascii_stop(buf, start);
            let _ = arch::find_quote_or_backslash(buf, start);
            let _ = skip_string_trusted(buf, start);
            let _ = skip_value_trusted(buf, start);
            let _ = skip_value(buf, start, 0, 128);
            let _ = number_run_end(buf, start, true);
            let _ = number_run::validated_to_comma(buf, start);
            let want = string_end(buf, start);
            let got = scan_string(buf, start).map(|s| s.end).map_err(|_| ());
            assert_eq!(got, want, "string from {start} in {buf:?}");
            if start < buf.len() {
                let got = scan_text(buf, start, start, false, false)
                    .map(|s| s.end)
                    .map_err(|_| ());
                assert_eq!(got, want, "text from {start} in {buf:?}");
            }
        }
    }

    #[test]
    fn scanners_read_nothing_past_their_slice() {
        let mut guarded = Guarded::new();
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let pieces: &[&[u8]] = &[
            b"\"",
            b"\\",
            b"\\u00e9",
            b"\\n",
            b"\xc3\xa9",
            b"\xe2\x82\xac",
            b"\xf0\x9f\x98\x80",
            b"\xc3",
            b"\x80",
            b"\x01",
            b"1",
            b"-",
            b",",
            b".",
            b"[",
            b"]",
            b"{",
            b"}",
            b":",
            b" ",
            b"\\\\",
            b"\\u12",
            b"\xed\xa0\x80",
            b"0",
        ];
        for round in 0..1500 {
            let len = (next() % 160) as usize;
            let mut buf = Vec::new();
            while buf.len() < len {
                if !next().is_multiple_of(3) {
                    buf.push(b'a' + (next() % 3) as u8);
                } else {
                    buf.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
                }
            }
            buf.truncate(len);
            if round % 2 == 0 {
                every_kernel_from_every_start(guarded.at_end(&buf));
            } else {
                every_kernel_from_every_start(guarded.at_start(&buf));
            }
        }
        for len in 0..=160 {
            for fill in [b'a', b'1', 0xc3, b'\\', b'"'] {
                every_kernel_from_every_start(guarded.at_end(&vec![fill; len]));
            }
        }
        // Runs long enough for the AVX2 loops, which take over only after
        // a few hundred bytes, ending at every offset of their blocks.
        for len in 161..=1200 {
            for fill in [b'a', b'1', 0xc3] {
                let mut buf = vec![fill; len];
                buf[0] = b'"';
                let buf = guarded.at_end(&buf);
                for start in [0, 1] {
                    let _ = arch::find_string_stop(buf, start);
                    let _ = arch::find_ascii_stop(buf, start);
                    let _ = arch::find_quote_or_backslash(buf, start);
                    let _ = skip_string_trusted(buf, start);
                    let _ = skip_value(buf, start, 0, 128);
                    let _ = number_run_end(buf, start, true);
                    let _ = number_run::validated_to_comma(buf, start);
                    let want = string_end(buf, start);
                    assert_eq!(scan_string(buf, start).map(|s| s.end).map_err(|_| ()), want);
                    let got = scan_text(buf, start, start, false, false).map(|s| s.end);
                    assert_eq!(got.map_err(|_| ()), want);
                }
            }
        }
    }

    /// The string scanner's UTF-8 check (an AVX2 one past ASCII) agrees
    /// with std's on strings of escapes, multi-byte characters and
    /// invalid bytes.
    #[test]
    fn strings_are_checked_as_std_checks_utf8() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let pieces: &[&[u8]] = &[
            b"\xc3\xa9",
            b"\xe2\x82\xac",
            b"\xf0\x9f\x98\x80",
            b"\xf4\x8f\xbf\xbf",
            b"\xed\x9f\xbf",
            b"\xee\x80\x80",
            b"\\u00e9",
            b"\\n",
            b"\\\\",
            b"\\\"",
            b"a",
            b"bb",
            b"ccc",
        ];
        let invalid: &[u8] = &[
            0x80, 0xbf, 0xc0, 0xc1, 0xc2, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff, 0xa0, 0x90,
            0x8f,
        ];
        for _ in 0..40_000 {
            let mut buf = vec![b'"'];
            for _ in 0..next() % 120 {
                if next() % 100 < 3 {
                    buf.push(invalid[(next() % invalid.len() as u64) as usize]);
                } else {
                    buf.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
                }
            }
            buf.push(b'"');
            buf.extend_from_slice(&[b' '; 40][..(next() % 40) as usize]);
            let mut end = 1;
            while buf[end] != b'"' {
                end += match (buf[end], buf[end + 1]) {
                    (b'\\', b'u') => 6,
                    (b'\\', _) => 2,
                    _ => 1,
                };
            }
            let valid = std::str::from_utf8(&buf[1..end]).is_ok();
            let got = scan_string(&buf, 1);
            assert_eq!(got.is_ok(), valid, "{buf:x?} {got:?}");
            if let Ok(s) = got {
                assert_eq!(s.end, end + 1);
            }
        }
    }
}
