//! Arrays of numbers (embedding vectors, coordinates, byte arrays),
//! validated 64 bytes a step.
//!
//! The scalar grammar ([`super::number_run_end`]) spends about fifty
//! instructions on a number like `-0.873468,`: a branch per part. Here a
//! 64-byte window is classified at once (one bit per byte for each of
//! digit, `0`, `-`, `.`, `,` and space), and JSON's number grammar becomes
//! a handful of operations on those masks, so a window of five or six
//! numbers costs about what one did.
//!
//! Only what the masks can say for certain is taken: the longest prefix of
//! the window made of those six classes, cut after its last comma, when
//! every number in it is valid. Anything else (an exponent, a second space,
//! a number longer than the window, an error) is left to the scalar
//! grammar, which also reports errors where they are, so results and error
//! offsets are the scalar grammar's on every input.

/// One bit per byte of a 64-byte window (bit `i` for byte `i`) for each
/// class of byte a run of numbers is made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NumberClasses {
    /// `0`..=`9`.
    pub digit: u64,
    /// `0` (a number's first digit, when it is a zero, must be its last).
    pub zero: u64,
    pub minus: u64,
    pub dot: u64,
    pub comma: u64,
    pub space: u64,
}

impl NumberClasses {
    /// The classes of `window`, a byte at a time: the reference the vector
    /// classifiers are tested against.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn of(window: &[u8; 64]) -> Self {
        let mut c = NumberClasses::default();
        for (i, &b) in window.iter().enumerate() {
            let bit = 1u64 << i;
            let class = match b {
                b'0'..=b'9' => &mut c.digit,
                b'-' => &mut c.minus,
                b'.' => &mut c.dot,
                b',' => &mut c.comma,
                b' ' => &mut c.space,
                _ => continue,
            };
            *class |= bit;
            if b == b'0' {
                c.zero |= bit;
            }
        }
        c
    }
}

/// The offset of the last comma of the window's valid prefix, if it has
/// one. The window starts where a number starts (its `-` or first digit);
/// the prefix is the longest run of `number ,` elements from there, a
/// comma followed by at most one space before the next number, every
/// number `-? (0 | [1-9][0-9]*) (. [0-9]+)?`.
///
/// With `region` the bytes up to that comma, the grammar on the masks:
///
/// * a number starts at byte 0, after a comma and after a space;
/// * a space comes only right after a comma; a `-` only at a start;
/// * a number's first digit (at a start, or after its `-`) is a digit,
///   and if it is a `0` no digit follows it;
/// * adding the first digits to the digit mask carries each through its
///   run of digits to the byte after it, which must be a `.` or a `,`;
///   the byte after a `.` is a digit, and adding those bytes carries
///   through the fraction's digits, which must be followed by a `,`. That
///   also makes every `.` follow a digit, and every `,` follow a number.
#[inline(always)]
pub(crate) fn last_comma(c: &NumberClasses) -> Option<u32> {
    let class = c.digit | c.minus | c.dot | c.comma | c.space;
    let prefix = (!class).trailing_zeros();
    let commas = if prefix == 64 {
        c.comma
    } else {
        c.comma & ((1u64 << prefix) - 1)
    };
    if commas == 0 {
        return None;
    }
    let last = 63 - commas.leading_zeros();
    let region = u64::MAX >> (63 - last);
    let after_comma = c.comma << 1;
    let starts = (1 | (after_comma & !c.space) | (c.space << 1)) & region;
    let minus = c.minus & region;
    let first = ((starts & !minus) | (minus << 1)) & region;
    let after_dot = (c.dot & region) << 1;
    let not_digit = !c.digit;
    let bad = (minus & !starts)
        | (c.space & region & !after_comma)
        | ((first | after_dot) & not_digit)
        | ((first & c.zero) << 1 & c.digit)
        | (first.wrapping_add(c.digit) & not_digit & region & !(c.dot | c.comma))
        | (after_dot.wrapping_add(c.digit) & not_digit & region & !c.comma);
    (bad == 0).then_some(last)
}

/// Validates the elements of a run of numbers from `start` (where a number
/// starts) as far as whole windows reach, with `classify` reading a
/// window's classes: the index of the comma after the last number
/// validated, or `None` if not even the first window had one.
#[cfg_attr(
    not(all(target_arch = "x86_64", not(miri))),
    allow(dead_code, reason = "no classifier here")
)]
#[inline(always)]
pub(crate) fn run_last_comma(
    buf: &[u8],
    mut start: usize,
    classify: impl Fn(&[u8; 64]) -> NumberClasses,
) -> Option<usize> {
    let mut found = None;
    while let Some(window) = buf.get(start..start + 64) {
        let Some(last) = last_comma(&classify(window.try_into().unwrap())) else {
            break;
        };
        let comma = start + last as usize;
        found = Some(comma);
        start = comma + 1 + (buf.get(comma + 1) == Some(&b' ')) as usize;
    }
    found
}

/// [`run_last_comma`] with the fastest classifier this CPU has, or `None`
/// where there is none (the scalar grammar does the whole run).
#[inline(always)]
pub(crate) fn validated_to_comma(buf: &[u8], start: usize) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        if super::arch::avx2_available() {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { super::arch::number_run_avx2(buf, start) };
        }
    }
    let _ = (buf, start);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(window: &[u8; 64]) -> Option<u32> {
        // The longest prefix of the six classes, cut after its last comma,
        // walked element by element with the scalar grammar: all of it
        // valid, or nothing.
        let prefix = window
            .iter()
            .take_while(|b| b"0123456789-., ".contains(b))
            .count();
        let last = window[..prefix].iter().rposition(|&b| b == b',')?;
        let mut pos = 0;
        loop {
            let end = super::super::number_run_end(window, pos, false).ok()?;
            if end > last || window[end] != b',' {
                return None;
            }
            if end == last {
                return Some(last as u32);
            }
            pos = end + 1 + (window[end + 1] == b' ') as usize;
        }
    }

    fn window(text: &[u8]) -> [u8; 64] {
        let mut w = [b']'; 64];
        let n = text.len().min(64);
        w[..n].copy_from_slice(&text[..n]);
        w
    }

    /// A little xorshift, so the test needs no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn number(rng: &mut Rng) -> String {
        let mut s = String::new();
        if rng.below(2) == 0 {
            s.push('-');
        }
        match rng.below(4) {
            0 => s.push('0'),
            _ => {
                for i in 0..1 + rng.below(7) {
                    let d = if i == 0 {
                        1 + rng.below(9)
                    } else {
                        rng.below(10)
                    };
                    s.push((b'0' + d as u8) as char);
                }
            }
        }
        if rng.below(3) != 0 {
            s.push('.');
            for _ in 0..1 + rng.below(8) {
                s.push((b'0' + rng.below(10) as u8) as char);
            }
        }
        if rng.below(20) == 0 {
            s.push_str(["e5", "E-3", "e+12"][rng.below(3) as usize]);
        }
        s
    }

    fn run(rng: &mut Rng) -> Vec<u8> {
        let mut s = String::new();
        let spaced = rng.below(4) == 0;
        while s.len() < 80 {
            s.push_str(&number(rng));
            s.push(',');
            if spaced {
                s.push(' ');
            }
        }
        s.into_bytes()
    }

    const BYTES: &[u8] = b"0123456789-.,+eE ]\"x\n\x00\xff";

    /// Windows of numbers in many shapes, each cut at every byte and
    /// corrupted at every position: the masks' verdict must be the scalar
    /// grammar's.
    #[test]
    fn masks_agree_with_the_scalar_grammar() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut taken = 0;
        for _ in 0..3000 {
            let text = run(&mut rng);
            let mut cases = vec![window(&text)];
            for at in 0..64 {
                let mut w = window(&text);
                w[at] = BYTES[rng.below(BYTES.len() as u64) as usize];
                cases.push(w);
                let mut w = window(&text);
                w[at..].fill(b']');
                cases.push(w);
            }
            for w in cases {
                let want = reference(&w);
                assert_eq!(
                    last_comma(&NumberClasses::of(&w)),
                    want,
                    "{:?}",
                    String::from_utf8_lossy(&w)
                );
                taken += want.is_some() as usize;
            }
        }
        // The generator must exercise both verdicts.
        assert!(taken > 50_000, "{taken}");
    }

    #[test]
    fn every_two_bytes_at_every_position() {
        // Pairs of bytes from the grammar's alphabet planted into a valid
        // run, at every position: all the local mistakes (`--`, `.,`,
        // `0` then a digit, `,,`, a space not after a comma...).
        let base = b"-0.5,12,0,-3.25, 7.0,100,-0,8.125,0.0,4,-6.5,33,2.5,9,1.75,6,";
        let base = window(base);
        let alphabet = b"0159-., e]";
        for at in 0..63 {
            for &a in alphabet {
                for &b in alphabet {
                    let mut w = base;
                    w[at] = a;
                    w[at + 1] = b;
                    assert_eq!(
                        last_comma(&NumberClasses::of(&w)),
                        reference(&w),
                        "{:?}",
                        String::from_utf8_lossy(&w)
                    );
                }
            }
        }
    }

    #[test]
    fn runs_go_from_window_to_window() {
        let mut rng = Rng(7);
        let mut text = Vec::new();
        while text.len() < 1000 {
            text.extend_from_slice(
                format!("{:.6},", rng.below(2_000_000) as f64 / 1e6 - 1.0).as_bytes(),
            );
        }
        text.extend_from_slice(b"0.5");
        let last = text.len() - 4;
        text.extend_from_slice(&[b']'; 64]);
        assert_eq!(run_last_comma(&text, 0, NumberClasses::of), Some(last));
        assert_eq!(validated_to_comma(&text, 0).unwrap_or(last), last);
        // Windows are whole: one cut short of 64 bytes is not read.
        assert_eq!(run_last_comma(&text[..63], 0, NumberClasses::of), None);
        // An exponent stops the masks at the comma before it.
        let text = b"1.5,2.5,3e5,4.5,5.5,6.5,7.5,8.5,9.5,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5]";
        assert_eq!(run_last_comma(text, 0, NumberClasses::of), Some(7));
    }

    /// Whole runs (the masks' windows, the scalar grammar between them and
    /// after them), cut short and corrupted: the run's end or the error's
    /// offset is the scalar grammar's alone on every input.
    #[test]
    fn runs_end_where_the_scalar_grammar_ends_them() {
        let mut rng = Rng(0x5eed);
        for round in 0..4000 {
            let mut text = b"[".to_vec();
            let spaced = rng.below(4) == 0;
            for _ in 0..1 + rng.below(40) {
                text.extend_from_slice(number(&mut rng).as_bytes());
                text.push(b',');
                if spaced {
                    text.push(b' ');
                }
            }
            text.extend_from_slice(number(&mut rng).as_bytes());
            text.extend_from_slice(b"],\"x\":[1,2]}");
            for _ in 0..rng.below(3) {
                let at = 1 + rng.below(text.len() as u64 - 1) as usize;
                text[at] = BYTES[rng.below(BYTES.len() as u64) as usize];
            }
            if round % 5 == 0 {
                text.truncate(1 + rng.below(text.len() as u64) as usize);
            }
            if !matches!(text.get(1), Some(b'-' | b'0'..=b'9')) {
                continue;
            }
            assert_eq!(
                super::super::number_run_end(&text, 1, true),
                super::super::number_run_end_in(&text, 1, true, false),
                "{:?}",
                String::from_utf8_lossy(&text)
            );
        }
    }
}
