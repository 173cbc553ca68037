//! Walking validated JSON arrays and objects, tuned for Ethereum params:
//! strings (nearly all of them hex) are skipped with the scanner's string
//! kernel, and the iterators here are the one walk the views make over
//! their values: each element or member is found once.
//!
//! Everything here reads text the scanner already validated, so it never
//! checks grammar; the decoders check the values they are asked for.

use crate::json::{JsonStr, RawJson};

use crate::scan::{skip_string_trusted, skip_string_trusted_escaped, skip_value_trusted, skip_ws};

/// The index after the validated value at `buf[pos]`. Strings are
/// skipped with the scanner's string kernel (SIMD, 16 bytes a step and
/// more past 64: on an `eth_getLogs` filter about 10% fewer instructions
/// than the eight-bytes-at-a-time loop this walk had, and about 5%
/// faster), inlined here: nearly every Ethereum value is a string, and
/// the call into the general skipper and its dispatch on the first byte
/// cost more than the kernel's first step.
#[inline(always)]
pub(crate) fn skip_value(buf: &[u8], pos: usize) -> usize {
    if buf.get(pos) == Some(&b'"') {
        skip_string_trusted(buf, pos + 1)
    } else {
        skip_value_trusted(buf, pos)
    }
}

/// The elements of a validated array (`buf` is the whole array).
#[derive(Clone, Debug)]
pub(crate) struct Elements<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Elements<'a> {
    pub(crate) fn new(array: RawJson<'a>) -> Self {
        Elements::at(array, 1)
    }

    /// The elements of `array` from index `pos` on: just after its `[`
    /// or a comma.
    pub(crate) fn at(array: RawJson<'a>, pos: usize) -> Self {
        Elements {
            buf: array.as_bytes(),
            pos,
        }
    }

    /// The array's bytes and the index where the next element (or
    /// whitespace before it) starts, for callers that read an element
    /// themselves and then [`resume`](Elements::resume) after it.
    #[inline(always)]
    pub(crate) fn peek(&mut self) -> Option<(&'a [u8], usize)> {
        let start = skip_ws(self.buf, self.pos);
        match self.buf.get(start) {
            None | Some(b']') => {
                self.pos = self.buf.len();
                None
            }
            Some(_) => Some((self.buf, start)),
        }
    }

    /// Continues after an element that ended at `end`.
    #[inline(always)]
    pub(crate) fn resume(&mut self, end: usize) {
        self.pos = skip_ws(self.buf, end) + 1;
    }
}

/// Where the closing quote of a validated array's last element is, when
/// that element is a string: the array's last byte is `]`, and the quote
/// is the last byte before it that is not whitespace.
#[inline(always)]
pub(crate) fn last_string_end(array: &[u8]) -> Option<usize> {
    let inner = array.get(..array.len().checked_sub(1)?)?;
    let end = inner.iter().rposition(|&b| !crate::scan::is_ws(b))?;
    (inner[end] == b'"').then_some(end)
}

impl<'a> Iterator for Elements<'a> {
    type Item = RawJson<'a>;

    #[inline]
    fn next(&mut self) -> Option<RawJson<'a>> {
        let (buf, start) = self.peek()?;
        let end = skip_value(buf, start);
        self.resume(end);
        Some(RawJson::from_validated(&buf[start..end]))
    }
}

/// The members of a validated object.
#[derive(Clone, Debug)]
pub(crate) struct Members<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The index after the closing brace, once the walk reached it.
    end: usize,
}

impl<'a> Members<'a> {
    #[cfg(test)]
    pub(crate) fn new(object: RawJson<'a>) -> Self {
        Members::at(object.as_bytes(), 0)
    }

    /// The members of the object whose `{` is at `buf[start]` (the object
    /// may be followed by more text).
    pub(crate) fn at(buf: &'a [u8], start: usize) -> Self {
        Members {
            buf,
            pos: start + 1,
            end: 0,
        }
    }

    /// The index after the closing brace: known once the walk is over.
    pub(crate) fn end(&self) -> Option<usize> {
        (self.end != 0).then_some(self.end)
    }

    /// The next member's name and the index where its value starts, for
    /// callers that read the value themselves (decoding it as they find
    /// its end) and then say where it ended with
    /// [`value_ended`](Members::value_ended).
    #[inline(always)]
    pub(crate) fn next_name(&mut self) -> Option<(JsonStr<'a>, usize)> {
        let buf = self.buf;
        let key_start = skip_ws(buf, self.pos);
        if buf.get(key_start) != Some(&b'"') {
            if self.pos < buf.len() && self.end == 0 {
                // The closing brace of an empty object.
                self.end = key_start + 1;
            }
            self.pos = buf.len();
            return None;
        }
        let (key_end, escaped) = skip_string_trusted_escaped(buf, key_start + 1);
        let key = JsonStr::from_content(&buf[key_start + 1..key_end - 1], escaped);
        Some((key, skip_ws(buf, skip_ws(buf, key_end) + 1)))
    }

    /// Continues after the value [`next_name`](Members::next_name) pointed
    /// at, which ended at `value_end`.
    #[inline(always)]
    pub(crate) fn value_ended(&mut self, value_end: usize) {
        let separator = skip_ws(self.buf, value_end);
        if self.buf.get(separator) == Some(&b'}') {
            self.end = separator + 1;
            self.pos = self.buf.len();
        } else {
            self.pos = separator + 1;
        }
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = (JsonStr<'a>, RawJson<'a>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (key, value_start) = self.next_name()?;
        let value_end = skip_value(self.buf, value_start);
        self.value_ended(value_end);
        Some((
            key,
            RawJson::from_validated(&self.buf[value_start..value_end]),
        ))
    }
}

/// A member's name as the JSON string it was written as, quotes included:
/// what an error about the member itself (an unknown one) shows as
/// received. `key` must be a name [`Members`] found in `buf`.
pub(crate) fn quoted_key<'a>(buf: &'a [u8], key: JsonStr<'a>) -> RawJson<'a> {
    let content = key.as_bytes();
    // The name is a slice of `buf`: its offset there, by address.
    let start = content.as_ptr() as usize - buf.as_ptr() as usize;
    RawJson::from_validated(&buf[start - 1..start + content.len() + 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_agree_with_the_core_iterators() {
        let arena = bumpalo::Bump::new();
        let msg = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[ "a\"b\\" , {"k\u0041":[1,{"x":"]"}], "b" : null } ,[[]], -1.5e3,true,"0x12"]}"#;
        let p = crate::parse(msg, &arena)
            .unwrap()
            .into_single()
            .unwrap()
            .request()
            .unwrap()
            .params()
            .unwrap();
        let ours: Vec<_> = Elements::new(p.as_value()).collect();
        let core: Vec<_> = p.iter().collect();
        assert_eq!(ours, core);
        let obj = core[1];
        let ours: Vec<_> = Members::new(obj).collect();
        let core: Vec<_> = obj.as_params().unwrap().entries().collect();
        assert_eq!(ours, core);
        assert_eq!(Elements::new(ours[0].1).count(), 2);
        let mut m = Members::at(b"[ {\"a\":{\"}\":1} } ,2]", 2);
        assert_eq!(m.end(), None);
        assert_eq!(m.by_ref().count(), 1);
        assert_eq!(m.end(), Some(16));
        let mut empty = Members::at(b"{ }", 0);
        assert_eq!((empty.next(), empty.end()), (None, Some(3)));
    }
}
