//! Typed decoding of params where borrowed strings always work.
//!
//! serde_json lends `&'a str` straight from the input only for strings
//! without escapes; a string with one (`"Ad\u00e8le"`, which web3.py and
//! `json.dumps` write for any non-ASCII text) is decoded into a scratch
//! buffer that lives for one call, and a `&'a str` field then fails with
//! "expected a borrowed string". This wrapper sits between serde_json's
//! deserializer and the target type: every string (and byte string) that
//! serde_json can only lend for a moment is copied into the per-message
//! arena, which lives as long as the message, and handed on as borrowed.
//! Strings without escapes still come straight from the input.
//!
//! The wrapper forwards everything else unchanged, at every depth (maps,
//! sequences, enums, options, newtypes), so what decodes with serde_json
//! decodes the same way here.

use core::fmt;

use bumpalo::Bump;
use serde::de::{self, DeserializeSeed, Deserializer, Visitor};

/// Decodes `T` from `json` (validated JSON text), lending escaped strings
/// from `arena`; the params as a whole read as [`Top`] says.
pub(crate) fn from_slice_in<'a, T: de::Deserialize<'a>>(
    json: &'a [u8],
    arena: &'a Bump,
) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let value = T::deserialize(Top {
        inner: Lending {
            inner: &mut de,
            arena,
        },
        absent: false,
    })?;
    de.end()?;
    Ok(value)
}

/// Decodes `T` for a message without params (or with `"params": null`):
/// as `[]` (`()` and tuples of `Option`s take it), but an `Option` as
/// the whole params is `None` and a map is empty.
pub(crate) fn absent<'a, T: de::Deserialize<'a>>() -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(b"[]");
    // Not `end()`: an `Option` or a map leaves the `[]` unread.
    T::deserialize(Top {
        inner: &mut de,
        absent: true,
    })
}

/// Decodes `T` from `json`, one validated JSON value of any kind, as
/// serde_json decodes a value (no params rules: [`Top`] is left out),
/// lending escaped strings from `arena`.
pub(crate) fn value_from_slice_in<'a, T: de::Deserialize<'a>>(
    json: &'a [u8],
    arena: &'a Bump,
) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let value = T::deserialize(Lending {
        inner: &mut de,
        arena,
    })?;
    de.end()?;
    Ok(value)
}

/// Decodes `T` from `json` (validated JSON text) with serde_json, the
/// params as a whole read as [`Top`] says.
pub(crate) fn from_slice<'a, T: de::Deserialize<'a>>(
    json: &'a [u8],
) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let value = T::deserialize(Top {
        inner: &mut de,
        absent: false,
    })?;
    de.end()?;
    Ok(value)
}

/// The params as a whole, as JSON-RPC clients send them: `()` (and a unit
/// struct) accepts `[]` and `{}`, the ways clients send "no params" (`[]`
/// is also what absent params decode as); a tuple, tuple struct or struct
/// read from an array whose trailing values are missing reads them as
/// `null`, so trailing `Option`s may be left out (`[1]` into `(u64,
/// Option<u64>)`, as geth reads optional arguments), and a missing
/// required one is "invalid length". A field whose type takes `null`
/// (`Option`, `serde_json::Value`, `()`) therefore takes it when left out
/// of positional params, not its `#[serde(default)]` (serde applies a
/// default only when the array ends, and it never ends early here);
/// by-name params (an object) get the default as serde gives it. An
/// `Option` as the whole params is `None` when they are absent and
/// otherwise reads its content by these rules; a map is empty when they
/// are absent. A newtype struct's content is the params as a whole as
/// well (`struct P(Option<X>)` is `P(None)` for absent params); nested
/// values are read as serde_json reads them.
struct Top<D> {
    inner: D,
    /// The message has no params (or `"params": null`): read as `[]`,
    /// but an `Option` as the whole params is `None` and a map (or a
    /// struct with `#[serde(flatten)]`, which serde reads as one) is
    /// empty, as serde_json reads `null` into an `Option`.
    absent: bool,
}

/// Forwards each named `deserialize_*` method of a wrapping deserializer
/// to `inner`, with the visitor wrapped by `$wrap` (in which `$this` is
/// the wrapper and `$visitor` the visitor).
macro_rules! forward_wrapped {
    ($this:ident, $visitor:ident => $wrap:expr; $($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'a>>(self, $visitor: V) -> Result<V::Value, D::Error> {
            let $this = self;
            $this.inner.$method($wrap)
        }
    )*};
}

/// [`forward_wrapped`] for the methods that both wrapping deserializers
/// ([`Top`], [`Lending`]) pass through; each handles the others its own
/// way.
macro_rules! forward_common {
    ($this:ident, $visitor:ident => $wrap:expr) => {
        forward_wrapped!($this, $visitor => $wrap;
            deserialize_any,
            deserialize_bool,
            deserialize_i8,
            deserialize_i16,
            deserialize_i32,
            deserialize_i64,
            deserialize_i128,
            deserialize_u8,
            deserialize_u16,
            deserialize_u32,
            deserialize_u64,
            deserialize_u128,
            deserialize_f32,
            deserialize_f64,
            deserialize_char,
            deserialize_str,
            deserialize_string,
            deserialize_bytes,
            deserialize_byte_buf,
            deserialize_seq,
            deserialize_identifier,
            deserialize_ignored_any,
        );
    };
}

impl<'a, D: Deserializer<'a>> Deserializer<'a> for Top<D> {
    type Error = D::Error;

    forward_common!(this, visitor => visitor);

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, D::Error> {
        if self.absent {
            return visitor.visit_none();
        }
        // Given params are `Some`, read by these rules too (a tuple's
        // trailing `Option`s may be left out inside it as well).
        visitor.visit_some(self)
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, D::Error> {
        if self.absent {
            let empty = std::iter::empty::<((), ())>();
            return visitor.visit_map(de::value::MapDeserializer::new(empty));
        }
        self.inner.deserialize_map(visitor)
    }

    fn deserialize_unit<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(NoParams(visitor))
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(NoParams(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        // serde_json's `RawValue` is a newtype struct under this name and
        // takes the text only from serde_json itself.
        if name == RAW_VALUE_TOKEN {
            return self.inner.deserialize_newtype_struct(name, visitor);
        }
        // The content is the params as a whole too (`struct P((u64,
        // Option<u64>))` takes `[1]` as the tuple does).
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_tuple<V: Visitor<'a>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple(
            len,
            Padded {
                inner: visitor,
                len,
            },
        )
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple_struct(
            name,
            len,
            Padded {
                inner: visitor,
                len,
            },
        )
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        // Positional params into a struct (serde reads one from an array,
        // field by field) are read as a tuple's: a jsonrpsee method whose
        // params come by position or by name becomes one struct.
        self.inner.deserialize_struct(
            name,
            fields,
            Padded {
                inner: visitor,
                len: fields.len(),
            },
        )
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// The name under which serde_json's `RawValue` asks for its text (its
/// `Deserialize` calls `deserialize_newtype_struct` with it).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// A unit visitor that takes an empty array or object for "no params".
struct NoParams<V>(V);

impl<'a, V: Visitor<'a>> Visitor<'a> for NoParams<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no params")
    }

    fn visit_seq<A: de::SeqAccess<'a>>(self, mut seq: A) -> Result<V::Value, A::Error> {
        let mut len = 0;
        while seq.next_element::<de::IgnoredAny>()?.is_some() {
            len += 1;
        }
        if len > 0 {
            return Err(de::Error::invalid_length(len, &self));
        }
        self.0.visit_unit()
    }

    fn visit_map<A: de::MapAccess<'a>>(self, mut map: A) -> Result<V::Value, A::Error> {
        let mut len = 0;
        while map
            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
            .is_some()
        {
            len += 1;
        }
        if len > 0 {
            return Err(de::Error::invalid_length(len, &self));
        }
        self.0.visit_unit()
    }
}

/// A tuple visitor whose sequence reads missing trailing values as `null`
/// (for a struct, whose map is read as it is).
struct Padded<V> {
    inner: V,
    len: usize,
}

impl<'a, V: Visitor<'a>> Visitor<'a> for Padded<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_seq<A: de::SeqAccess<'a>>(self, seq: A) -> Result<V::Value, A::Error> {
        let mut padded = PaddedSeq {
            inner: Some(seq),
            read: 0,
            given: 0,
            len: self.len,
        };
        let value = match self.inner.visit_seq(&mut padded) {
            Ok(value) => value,
            Err(PadError::Inner(e)) => return Err(e),
            // The visitor counted the `null`s padded in; the client sent
            // `given` values (serde_json: "invalid length 0, expected a
            // tuple of size 2" for `[]`).
            Err(PadError::Length { len, expected }) => {
                let len = if padded.read > padded.given {
                    padded.given
                } else {
                    len
                };
                return Err(de::Error::invalid_length(len, &expected.as_str()));
            }
        };
        // Values past the tuple: counted and refused here, since
        // serde_json would refuse them as "trailing characters", which
        // says nothing a client can act on.
        if let Some(rest) = padded.inner.as_mut() {
            let mut extra = 0;
            while rest.next_element::<de::IgnoredAny>()?.is_some() {
                extra += 1;
            }
            if extra > 0 {
                // What the visitor read, not `len`: a struct's field list
                // names its aliases too.
                return Err(de::Error::custom(format_args!(
                    "too many params: {} given, at most {} expected",
                    padded.given + extra,
                    padded.read
                )));
            }
        }
        Ok(value)
    }

    fn visit_map<A: de::MapAccess<'a>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(map)
    }
}

/// The sequence of [`Padded`]: the array's values, then `null`s up to the
/// tuple's length.
struct PaddedSeq<A> {
    /// `None` once the array has ended.
    inner: Option<A>,
    /// Values handed out so far (read or padded).
    read: usize,
    /// Values the array held.
    given: usize,
    len: usize,
}

/// A seed lent for one value: still there afterwards if it was not used
/// (the array had ended).
struct Lent<'s, T>(&'s mut Option<T>);

impl<'a, T: DeserializeSeed<'a>> DeserializeSeed<'a> for Lent<'_, T> {
    type Value = T::Value;

    fn deserialize<D: Deserializer<'a>>(self, d: D) -> Result<T::Value, D::Error> {
        match self.0.take() {
            Some(seed) => seed.deserialize(d),
            None => Err(de::Error::custom("a sequence value was read twice")),
        }
    }
}

/// The errors of a [`PaddedSeq`]'s visitor: its own "invalid length" kept
/// apart (only on the failure path is the expectation written out), so
/// that [`Padded`] can count the values the client sent, not the `null`s
/// padded in; every other error is the inner sequence's own, made as it
/// makes it.
enum PadError<E> {
    Inner(E),
    Length { len: usize, expected: String },
}

impl<E: de::Error> de::Error for PadError<E> {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        PadError::Inner(E::custom(msg))
    }
    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        PadError::Inner(E::invalid_type(unexp, exp))
    }
    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        PadError::Inner(E::invalid_value(unexp, exp))
    }
    fn invalid_length(len: usize, exp: &dyn de::Expected) -> Self {
        PadError::Length {
            len,
            expected: exp.to_string(),
        }
    }
    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        PadError::Inner(E::unknown_variant(variant, expected))
    }
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        PadError::Inner(E::unknown_field(field, expected))
    }
    fn missing_field(field: &'static str) -> Self {
        PadError::Inner(E::missing_field(field))
    }
    fn duplicate_field(field: &'static str) -> Self {
        PadError::Inner(E::duplicate_field(field))
    }
}

impl<E: fmt::Display> fmt::Display for PadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PadError::Inner(e) => e.fmt(f),
            PadError::Length { len, expected } => {
                write!(f, "invalid length {len}, expected {expected}")
            }
        }
    }
}

impl<E: fmt::Debug> fmt::Debug for PadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PadError::Inner(e) => e.fmt(f),
            PadError::Length { len, expected } => f
                .debug_struct("Length")
                .field("len", len)
                .field("expected", expected)
                .finish(),
        }
    }
}

impl<E: std::error::Error> std::error::Error for PadError<E> {}

impl<'a, A: de::SeqAccess<'a>> de::SeqAccess<'a> for PaddedSeq<A> {
    type Error = PadError<A::Error>;

    fn next_element_seed<T: DeserializeSeed<'a>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        let mut seed = Some(seed);
        if let Some(inner) = self.inner.as_mut() {
            let next = inner.next_element_seed(Lent(&mut seed));
            if let Some(value) = next.map_err(PadError::Inner)? {
                self.read += 1;
                self.given += 1;
                return Ok(Some(value));
            }
            self.inner = None;
        }
        let Some(seed) = seed.filter(|_| self.read < self.len) else {
            return Ok(None);
        };
        self.read += 1;
        // A value that cannot be `null` is not there: the visitor says
        // what it expected ("invalid length 1, expected a tuple of size 2")
        // or, for a struct field with `#[serde(default)]`, takes its
        // default.
        Ok(seed
            .deserialize(de::value::UnitDeserializer::<NotNull>::new())
            .ok())
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.len.saturating_sub(self.read))
    }
}

/// Why a padded-in `null` was refused: never shown (the visitor says what
/// it expected instead), so it carries nothing, and a field whose default
/// is taken when a `null` is refused (`#[serde(default)]` on a struct read
/// from an array) costs no allocation, as serde_json's message would.
#[derive(Debug)]
struct NotNull;

impl fmt::Display for NotNull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not null")
    }
}

impl std::error::Error for NotNull {}

impl de::Error for NotNull {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NotNull
    }
}

/// A deserializer that lends transient strings from the arena.
struct Lending<'a, D> {
    inner: D,
    arena: &'a Bump,
}

/// A visitor that turns transient strings into borrowed ones.
struct Lend<'a, V> {
    inner: V,
    arena: &'a Bump,
}

impl<'a, D: Deserializer<'a>> Deserializer<'a> for Lending<'a, D> {
    type Error = D::Error;

    forward_common!(this, visitor => Lend { inner: visitor, arena: this.arena });
    forward_wrapped!(this, visitor => Lend { inner: visitor, arena: this.arena };
        deserialize_unit, deserialize_option, deserialize_map);

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let arena = self.arena;
        self.inner.deserialize_unit_struct(
            name,
            Lend {
                inner: visitor,
                arena,
            },
        )
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let arena = self.arena;
        self.inner.deserialize_newtype_struct(
            name,
            Lend {
                inner: visitor,
                arena,
            },
        )
    }

    fn deserialize_tuple<V: Visitor<'a>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let arena = self.arena;
        self.inner.deserialize_tuple(
            len,
            Lend {
                inner: visitor,
                arena,
            },
        )
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let arena = self.arena;
        self.inner.deserialize_tuple_struct(
            name,
            len,
            Lend {
                inner: visitor,
                arena,
            },
        )
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let arena = self.arena;
        self.inner.deserialize_struct(
            name,
            fields,
            Lend {
                inner: visitor,
                arena,
            },
        )
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let arena = self.arena;
        self.inner.deserialize_enum(
            name,
            variants,
            Lend {
                inner: visitor,
                arena,
            },
        )
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($t:ty)),* $(,)?) => {$(
        fn $method<E: de::Error>(self, v: $t) -> Result<Self::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'a, V: Visitor<'a>> Visitor<'a> for Lend<'a, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_borrowed_str(&'a str),
        visit_borrowed_bytes(&'a [u8]),
    );

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.inner.visit_borrowed_str(self.arena.alloc_str(v))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        self.inner.visit_borrowed_str(self.arena.alloc_str(&v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        self.inner
            .visit_borrowed_bytes(self.arena.alloc_slice_copy(v))
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
        self.inner
            .visit_borrowed_bytes(self.arena.alloc_slice_copy(&v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_some<D: Deserializer<'a>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Lending {
            inner: d,
            arena: self.arena,
        })
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_newtype_struct<D: Deserializer<'a>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(Lending {
            inner: d,
            arena: self.arena,
        })
    }

    fn visit_seq<A: de::SeqAccess<'a>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(Lending {
            inner: seq,
            arena: self.arena,
        })
    }

    fn visit_map<A: de::MapAccess<'a>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(Lending {
            inner: map,
            arena: self.arena,
        })
    }

    fn visit_enum<A: de::EnumAccess<'a>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(Lending {
            inner: data,
            arena: self.arena,
        })
    }
}

/// A seed whose deserializer lends from the arena.
struct LendSeed<'a, S> {
    inner: S,
    arena: &'a Bump,
}

impl<'a, S: DeserializeSeed<'a>> DeserializeSeed<'a> for LendSeed<'a, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'a>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Lending {
            inner: d,
            arena: self.arena,
        })
    }
}

impl<'a, A: de::SeqAccess<'a>> de::SeqAccess<'a> for Lending<'a, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'a>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(LendSeed {
            inner: seed,
            arena: self.arena,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'a, A: de::MapAccess<'a>> de::MapAccess<'a> for Lending<'a, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'a>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(LendSeed {
            inner: seed,
            arena: self.arena,
        })
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.inner.next_value_seed(LendSeed {
            inner: seed,
            arena: self.arena,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'a, A: de::EnumAccess<'a>> de::EnumAccess<'a> for Lending<'a, A> {
    type Error = A::Error;
    type Variant = Lending<'a, A::Variant>;

    fn variant_seed<V: DeserializeSeed<'a>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), A::Error> {
        let arena = self.arena;
        let (value, variant) = self.inner.variant_seed(LendSeed { inner: seed, arena })?;
        Ok((
            value,
            Lending {
                inner: variant,
                arena,
            },
        ))
    }
}

impl<'a, A: de::VariantAccess<'a>> de::VariantAccess<'a> for Lending<'a, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'a>>(self, seed: T) -> Result<T::Value, A::Error> {
        let arena = self.arena;
        self.inner
            .newtype_variant_seed(LendSeed { inner: seed, arena })
    }

    fn tuple_variant<V: Visitor<'a>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let arena = self.arena;
        self.inner.tuple_variant(
            len,
            Lend {
                inner: visitor,
                arena,
            },
        )
    }

    fn struct_variant<V: Visitor<'a>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let arena = self.arena;
        self.inner.struct_variant(
            fields,
            Lend {
                inner: visitor,
                arena,
            },
        )
    }
}

/// The byte offset in `json` of what `e` is about: the last byte serde_json
/// read, or, for an array or object of the wrong type (serde_json reports
/// it before reading its bracket), the bracket.
pub(crate) fn error_offset(json: &[u8], e: &serde_json::Error) -> usize {
    let at = offset_of(json, e.line(), e.column());
    let text = e.to_string();
    let bracket = |b: u8| json.get(at + 1) == Some(&b);
    // Column 0: nothing read on the line, the offset is the bracket's.
    let container = e.column() > 0
        && ((text.starts_with("invalid type: sequence") && bracket(b'['))
            || (text.starts_with("invalid type: map") && bracket(b'{')));
    at + usize::from(container)
}

/// The byte offset in `json` of serde_json's `line` and `column` (both
/// counted from 1; column 0 means "before the first byte of the line").
pub(crate) fn offset_of(json: &[u8], line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match memchr::memchr(b'\n', &json[start..]) {
            Some(i) => start += i + 1,
            None => return json.len(),
        }
    }
    (start + column.saturating_sub(1)).min(json.len())
}
