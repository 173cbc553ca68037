//! Layer 4: method name → value through a perfect-hash table.
//!
//! The table is built once, when the set of names is known, and never
//! changes: a lookup hashes the name once, reads one bucket pilot, probes one
//! slot and compares the bytes once. There is no probing sequence, no
//! tombstone, no lock.
//!
//! Sets of up to 128 names that differ in their length or ends (every real
//! method set) are placed directly: the builder searches a seed under which
//! `((fold(name) ^ seed) * K) >> shift` is injective in a table of about
//! n²/16 slots (at least 4n; 256 slots of a cache line, 16 KiB, for forty
//! names), so a lookup is one multiply and one load.
//!
//! Larger sets use PTHash-style "hash and displace": the top bits of every
//! name's 64-bit hash pick a bucket; buckets are placed largest first, each
//! trying pilot values until all of its names land in free slots of a
//! power-of-two table of `n + n/4` slots rounded up. A lookup is then one
//! multiply-shift away from its slot: `slot = ((hash ^ pilot[bucket]) * K) >>
//! shift`. A dense array of one-byte tags (seven bits of each name's hash)
//! beside the slots lets most misses stop before reading their slot, which
//! in a large set is not in the L1 cache.
//!
//! The hash itself adapts to the names: when the names differ in their length
//! or in their first and last eight bytes (true of every real method set: the
//! Ethereum and MCP names, and `eth_getTransactionByBlockHashAndIndex` vs
//! `eth_getTransactionByBlockNumberAndIndex`, which differ in length), only
//! those 16 bytes and the length are hashed, in two loads and two independent
//! multiplies, whatever the name's length. Large sets often hold names that
//! agree there (`trace_getBlockByNumber`, `trace_getStateByNumber`): they are
//! hashed on four words, which with the length hold every byte of a name of
//! up to 32 bytes (see `words`), folded into one before one multiply. Sets
//! in which two names fold alike (two names over 32 bytes agreeing on all
//! four words, or, rarely, two shorter ones whose words the fold cancels)
//! hash every byte: lookups stay exact either way, only slower. Each slot keeps the name's length
//! and up to 32 of its bytes inline, so the comparison that makes the lookup
//! exact reads the name storage only for the middle of names longer than 32
//! bytes.

use std::fmt;
use std::sync::Arc;

/// Why a router could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The same method name was registered twice.
    Duplicate(String),
    /// Names starting with `rpc.` are reserved by the JSON-RPC 2.0
    /// specification for rpc-internal methods.
    Reserved(String),
    /// The empty string is not a method name.
    Empty,
    /// More names than the table supports: 2^31 - 1 names, or names of
    /// about 4 GiB in all.
    TooMany,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Duplicate(name) => write!(f, "method {name:?} is registered twice"),
            BuildError::Reserved(name) if name == "rpc.discover" => f.write_str(
                "method \"rpc.discover\" is reserved: register it with \
                 `DispatcherBuilder::rpc_discover`",
            ),
            BuildError::Reserved(name) => write!(
                f,
                "method {name:?} starts with \"rpc.\", which JSON-RPC 2.0 reserves"
            ),
            BuildError::Empty => f.write_str("the empty string is not a method name"),
            BuildError::TooMany => f.write_str("too many methods"),
        }
    }
}

impl std::error::Error for BuildError {}

/// An immutable map from method names to values (typically handlers), built
/// once into a perfect-hash table.
///
/// `Router` is `Send + Sync` when its values are, and cloning it clones an
/// `Arc`: share one across threads without locks.
///
/// ```
/// use rpcwire::router::Router;
/// let router = Router::new([("eth_call", 1), ("eth_chainId", 2)])?;
/// assert_eq!(router.get("eth_chainId"), Some(&2));
/// assert_eq!(router.get("eth_chainid"), None);
/// assert!(Router::new([("rpc.discover", 0)]).is_err());
/// # Ok::<(), rpcwire::router::BuildError>(())
/// ```
pub struct Router<T> {
    table: Arc<Table<T>>,
}

impl<T> Clone for Router<T> {
    fn clone(&self) -> Self {
        Router {
            table: Arc::clone(&self.table),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Router<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// One slot of the table. The name's length and up to 32 of its bytes (the
/// first and last eight, and for names over 16 bytes the eight after the
/// first and before the last) are kept inline, so a lookup compares them
/// without touching the name storage; only names longer than 32 bytes compare
/// the rest there.
#[derive(Clone, Copy)]
struct Slot {
    first: u64,
    last: u64,
    mid: (u64, u64),
    /// Length of the name; `u32::MAX` marks an empty slot, which no name
    /// matches.
    len: u32,
    /// Offset of the name in `Table::names`.
    start: u32,
}

/// A slot and its value, aligned to a cache line: a lookup reads one line.
#[repr(C, align(64))]
struct Line<T>(Slot, Option<T>);

const EMPTY: Slot = Slot {
    first: 0,
    last: 0,
    mid: (0, 0),
    len: u32::MAX,
    start: 0,
};

/// The two inner words a slot keeps: the last two of [`words`] (for names
/// over 16 bytes the eight bytes after the first eight and the eight before
/// the last eight; for names of 8 to 16 bytes the ends again; zeros below).
/// With the ends and the length they hold every byte of a name of up to 32
/// bytes, and the same loads for every length of 8 or more, so a lookup
/// compares them without a branch on the length: in a set of names of
/// mixed lengths such a branch was mispredicted about every other lookup.
#[inline(always)]
fn mids(name: &[u8]) -> (u64, u64) {
    let [_, _, second, third] = words(name);
    (second, third)
}

/// What the hash of a large set reads of a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hash {
    /// The length and the first and last eight bytes.
    Ends,
    /// The length and four words (every byte of names up to 32 bytes),
    /// folded (a fold that can, rarely, make two such names alike: the
    /// build then falls back to `Full`).
    Words,
    /// Every byte.
    Full,
}

struct Table<T> {
    seed: u64,
    /// Small sets: the hash alone picks the slot, no pilot (see `fold`).
    direct: bool,
    /// What a lookup through the pilots hashes (`Ends` for direct sets).
    hash: Hash,
    /// Per bucket, the pilot's mixing word (a power-of-two count of buckets).
    pilots: Box<[u64]>,
    /// Through pilots only: per slot, seven bits of its name's hash (high
    /// bit set), 0 for an empty slot. Dense (one byte a slot), so it stays
    /// in the L1 cache where the slots of a large set do not: most misses
    /// stop here without reading their slot.
    tags: Box<[u8]>,
    bucket_shift: u32,
    /// A power-of-two count of slots, each with its value next to its key,
    /// so that a lookup touches one cache line of the table.
    slots: Box<[Line<T>]>,
    slot_shift: u32,
    /// Every name, back to back.
    names: Box<[u8]>,
    /// Per slot, the position of its name among those given to
    /// [`Router::new`] (`u32::MAX` for an empty slot): kept apart from the
    /// slots so that a slot and its value still fill one cache line.
    order: Box<[u32]>,
    len: usize,
}

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xC2B2_AE3D_27D4_EB4F;
const K2: u64 = 0x1656_67B1_9E37_79F9;

/// The first and the last eight bytes of `name`, overlapping for names of 8
/// to 15 bytes. Shorter names are covered by smaller overlapping loads: with
/// the length, the pair always determines the name.
#[inline(always)]
fn ends(name: &[u8]) -> (u64, u64) {
    let n = name.len();
    if n >= 8 {
        (load8(name, 0), load8(name, n - 8))
    } else if n >= 4 {
        let lo = u32::from_le_bytes(name[..4].try_into().unwrap()) as u64;
        let hi = u32::from_le_bytes(name[n - 4..].try_into().unwrap()) as u64;
        (lo | hi << 32, 0)
    } else if n > 0 {
        (
            name[0] as u64 | (name[n / 2] as u64) << 8 | (name[n - 1] as u64) << 16,
            0,
        )
    } else {
        (0, 0)
    }
}

#[inline(always)]
fn load8(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().unwrap())
}

/// Two independent multiplies: the high bits of the result depend on every
/// bit of the length and of both ends.
#[inline(always)]
fn hash_sampled(first: u64, last: u64, len: usize, seed: u64) -> u64 {
    (first ^ seed).wrapping_mul(K0) ^ (last ^ (len as u64) ^ seed.rotate_left(32)).wrapping_mul(K1)
}

/// Four words of a name of eight bytes or more: the first eight bytes, the
/// last eight, and the eight bytes at `min(8, n - 8)` and `n - 8 - min(8, n -
/// 8)`, offsets computed without a branch. Below 16 bytes the last two repeat
/// the first two; up to 32 bytes the four cover every byte. Shorter names
/// are their `ends` and two zeros.
#[inline(always)]
fn words(name: &[u8]) -> [u64; 4] {
    let n = name.len();
    if n >= 8 {
        let second = (n - 8).min(8);
        let third = n - 8 - second;
        [
            load8(name, 0),
            load8(name, n - 8),
            load8(name, second),
            load8(name, third),
        ]
    } else {
        let (first, last) = ends(name);
        [first, last, 0, 0]
    }
}

/// The four words and the length folded into one word (xor and rotate).
/// Sets whose names fold apart (checked when the table is built) hash the
/// fold with one multiply.
#[inline(always)]
fn fold_words(w: [u64; 4], len: usize) -> u64 {
    (w[0] ^ w[1].rotate_left(23))
        ^ (w[2].rotate_left(41) ^ w[3].rotate_left(7))
        ^ (len as u64) << 56
}

#[inline(always)]
fn hash_words(w: [u64; 4], len: usize, seed: u64) -> u64 {
    (fold_words(w, len) ^ seed).wrapping_mul(K0)
}

#[inline(always)]
fn hash_full(name: &[u8], seed: u64) -> u64 {
    let n = name.len();
    // The length goes through a multiply with the seed, not xored into the
    // start state: xored, names of two lengths whose first chunks differ by
    // `n1 * K2 ^ n2 * K2` (and alike after) would hash alike under every
    // seed, and the builder would retry seeds for ever.
    let mut h = (seed ^ n as u64).wrapping_mul(K2);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        h = (h ^ u64::from_le_bytes(c.try_into().unwrap()))
            .wrapping_mul(K1)
            .rotate_left(31);
    }
    // The last eight bytes (overlapping the chunks), or the short-name
    // packing: no copy of the remainder.
    let tail = if n >= 8 {
        load8(name, n - 8)
    } else {
        ends(name).0
    };
    (h ^ tail).wrapping_mul(K0)
}

/// The hash of `name`, whose [`words`] are `w`, for a lookup through the
/// pilots.
#[inline(always)]
fn hash_of(hash: Hash, name: &[u8], w: [u64; 4], seed: u64) -> u64 {
    match hash {
        // The first two words are the ends.
        Hash::Ends => hash_sampled(w[0], w[1], name.len(), seed),
        Hash::Words => hash_words(w, name.len(), seed),
        Hash::Full => hash_full(name, seed),
    }
}

/// The length and both ends folded into one word; small sets whose folds
/// differ are placed with one multiply of it (`direct` mode).
#[inline(always)]
fn fold(first: u64, last: u64, len: usize) -> u64 {
    first ^ last.rotate_left(29) ^ (len as u64) << 57
}

#[inline(always)]
fn direct_slot(fold: u64, seed: u64, slot_shift: u32) -> usize {
    ((fold ^ seed).wrapping_mul(K0) >> slot_shift) as usize
}

/// Sets up to this many names try `direct` mode first.
const DIRECT_MAX: usize = 128;

/// For a small set, a seed under which `direct_slot` is injective in a table
/// of `slots_len` slots (about n²/16, at least 4n), if one is found quickly.
fn place_direct(folds: &[u64], slots_len: usize, slot_shift: u32) -> Option<u64> {
    let mut sorted = folds.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    let mut taken = vec![0u32; slots_len];
    let mut seed = 0x1319_8A2E_0370_7344u64;
    for round in 1..=1u32 << 16 {
        let ok = folds.iter().all(|&f| {
            let s = direct_slot(f, seed, slot_shift);
            let free = taken[s] != round;
            taken[s] = round;
            free
        });
        if ok {
            return Some(seed);
        }
        seed = seed.wrapping_mul(K1).wrapping_add(round as u64);
    }
    None
}

#[inline(always)]
fn pilot_word(pilot: u32) -> u64 {
    (pilot as u64 + 1).wrapping_mul(K2)
}

#[inline(always)]
fn slot_of(hash: u64, pilot_word: u64, slot_shift: u32) -> usize {
    ((hash ^ pilot_word).wrapping_mul(K0) >> slot_shift) as usize
}

/// Seven low bits of a hash, high bit set: never 0, the tag of an empty
/// slot. (The bucket and the slot come from the high bits.)
#[inline(always)]
fn tag(hash: u64) -> u8 {
    hash as u8 | 0x80
}

#[inline(always)]
fn bucket_of(hash: u64, bucket_shift: u32) -> usize {
    (hash >> bucket_shift) as usize
}

impl<T> Router<T> {
    /// Builds a router from `(name, value)` pairs.
    ///
    /// Fails on a duplicate name, on a name starting with `rpc.` (reserved by
    /// the specification) and on the empty name.
    pub fn new<N: AsRef<str>>(
        entries: impl IntoIterator<Item = (N, T)>,
    ) -> Result<Self, BuildError> {
        let mut names_buf = Vec::new();
        let mut spans: Vec<(u32, u32)> = Vec::new();
        let mut values = Vec::new();
        for (name, value) in entries {
            let name = name.as_ref();
            if name.is_empty() {
                return Err(BuildError::Empty);
            }
            if name.starts_with("rpc.") {
                return Err(BuildError::Reserved(name.to_string()));
            }
            if spans.len() >= i32::MAX as usize
                || names_buf.len() + name.len() > u32::MAX as usize - 1
            {
                return Err(BuildError::TooMany);
            }
            spans.push((names_buf.len() as u32, name.len() as u32));
            names_buf.extend_from_slice(name.as_bytes());
            values.push(value);
        }
        let name_of = |i: usize| {
            let (s, l) = spans[i];
            &names_buf[s as usize..(s + l) as usize]
        };
        // Duplicates, found by sorting indices by name.
        let mut order: Vec<usize> = (0..spans.len()).collect();
        order.sort_unstable_by(|&a, &b| name_of(a).cmp(name_of(b)));
        for w in order.windows(2) {
            if name_of(w[0]) == name_of(w[1]) {
                let name = String::from_utf8_lossy(name_of(w[0])).into_owned();
                return Err(BuildError::Duplicate(name));
            }
        }
        // Sampling suffices if the two words `hash_sampled` reads, the first
        // 8 bytes and the last 8 xor the length, tell every name apart (two
        // names alike there hash alike under every seed: "a````````" and
        // "a```````", whose last words differ by `9 ^ 8`); else (length,
        // four words), which does for almost every set of names up to 32
        // bytes (the fold can make two alike; then every byte).
        let mut keys: Vec<(u64, u64)> = (0..spans.len())
            .map(|i| {
                let (first, last) = ends(name_of(i));
                (first, last ^ name_of(i).len() as u64)
            })
            .collect();
        keys.sort_unstable();
        let sampled = keys.windows(2).all(|w| w[0] != w[1]);
        let mut word_folds: Vec<u64> = (0..spans.len())
            .map(|i| fold_words(words(name_of(i)), name_of(i).len()))
            .collect();
        word_folds.sort_unstable();
        let hash = if sampled {
            Hash::Ends
        } else if word_folds.windows(2).all(|w| w[0] != w[1]) {
            Hash::Words
        } else {
            Hash::Full
        };

        let n = spans.len();
        let build = |seed: u64,
                     direct: bool,
                     hashes: &[u64],
                     pilots: Vec<u64>,
                     bucket_shift: u32,
                     slots: Vec<Option<usize>>,
                     slot_shift: u32,
                     values: Vec<T>| {
            let by_slot = by_slot(values, &slots);
            let order = slots
                .iter()
                .map(|s| s.map_or(u32::MAX, |i| i as u32))
                .collect();
            let tags = if direct {
                Box::default()
            } else {
                slots
                    .iter()
                    .map(|s| s.map_or(0, |i| tag(hashes[i])))
                    .collect()
            };
            let slots: Box<[Line<T>]> = slots
                .into_iter()
                .map(|s| match s {
                    Some(i) => {
                        let (first, last) = ends(name_of(i));
                        let mid = mids(name_of(i));
                        Slot {
                            first,
                            last,
                            mid,
                            len: spans[i].1,
                            start: spans[i].0,
                        }
                    }
                    None => EMPTY,
                })
                .zip(by_slot)
                .map(|(slot, value)| Line(slot, value))
                .collect();
            Table {
                seed,
                direct,
                hash,
                pilots: pilots.into(),
                tags,
                bucket_shift,
                slots,
                slot_shift,
                names: names_buf.clone().into(),
                order,
                len: n,
            }
        };
        if sampled && (1..=DIRECT_MAX).contains(&n) {
            let slots_len = (n * n / 16).max(4 * n).next_power_of_two();
            let slot_shift = 64 - slots_len.trailing_zeros();
            let folds: Vec<u64> = (0..n)
                .map(|i| {
                    let (first, last) = ends(name_of(i));
                    fold(first, last, name_of(i).len())
                })
                .collect();
            if let Some(seed) = place_direct(&folds, slots_len, slot_shift) {
                let mut slots = vec![None; slots_len];
                for (i, &f) in folds.iter().enumerate() {
                    slots[direct_slot(f, seed, slot_shift)] = Some(i);
                }
                let table = build(seed, true, &[], Vec::new(), 0, slots, slot_shift, values);
                return Ok(Router {
                    table: Arc::new(table),
                });
            }
        }
        // Powers of two, so that bucket and slot are a shift of the hash.
        let buckets = n.div_ceil(4).next_power_of_two().max(2);
        let slots_len = (n + n / 4).next_power_of_two().max(2);
        let bucket_shift = 64 - buckets.trailing_zeros();
        let slot_shift = 64 - slots_len.trailing_zeros();
        let mut seed = 0x243F_6A88_85A3_08D3u64;
        loop {
            let hashes: Vec<u64> = (0..n)
                .map(|i| hash_of(hash, name_of(i), words(name_of(i)), seed))
                .collect();
            if let Some((pilots, slots)) =
                place(&hashes, buckets, bucket_shift, slots_len, slot_shift)
            {
                let pilots = pilots.into_iter().map(pilot_word).collect();
                let table = build(
                    seed,
                    false,
                    &hashes,
                    pilots,
                    bucket_shift,
                    slots,
                    slot_shift,
                    values,
                );
                return Ok(Router {
                    table: Arc::new(table),
                });
            }
            seed = seed.wrapping_mul(K2).wrapping_add(1);
        }
    }

    /// The value registered for `name`, if any.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&T> {
        self.get_bytes(name.as_bytes())
    }

    /// [`get`](Router::get) for a name as bytes (names are compared byte
    /// for byte; bytes that are not UTF-8 match no name).
    ///
    /// ```
    /// let router = rpcwire::router::Router::new([("eth_call", 1), ("eth_chainId", 2)]).unwrap();
    /// assert_eq!(router.get_bytes(b"eth_chainId"), Some(&2));
    /// assert_eq!(router.get_bytes(b"eth_chainI\xff"), None);
    /// ```
    #[inline]
    pub fn get_bytes(&self, name: &[u8]) -> Option<&T> {
        let t = &*self.table;
        if !t.direct {
            return t.get_through_pilots(name);
        }
        let w = words(name);
        t.finish(
            name,
            w,
            direct_slot(fold(w[0], w[1], name.len()), t.seed, t.slot_shift),
        )
    }

    /// The position of `name` among the names given to
    /// [`new`](Router::new), if it is one of them: a dense index that an
    /// observer can keep a counter per method under.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        let t = &*self.table;
        let value: *const T = self.get(name)?;
        // `get` returns a reference into the line of its slot, so the
        // line's position is the slot (the hot lookup stays as it is).
        let slot = (value.addr() - t.slots.as_ptr().addr()) / size_of::<Line<T>>();
        t.order.get(slot).map(|&i| i as usize)
    }

    /// The number of names.
    pub fn len(&self) -> usize {
        self.table.len
    }

    /// Whether the router has no names.
    pub fn is_empty(&self) -> bool {
        self.table.len == 0
    }

    /// Every `(name, value)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &T)> + '_ {
        let t = &*self.table;
        t.slots.iter().filter_map(move |Line(s, v)| {
            let v = v.as_ref()?;
            let name = &t.names[s.start as usize..(s.start + s.len) as usize];
            // Names were `&str` when registered and are cut at their bounds.
            Some((core::str::from_utf8(name).ok()?, v))
        })
    }
}

impl<T> Table<T> {
    /// The lookup of large sets, kept out of line so that the direct path of
    /// [`Router::get`] compiles to straight-line code.
    #[inline(never)]
    fn get_through_pilots(&self, name: &[u8]) -> Option<&T> {
        let w = words(name);
        let h = hash_of(self.hash, name, w, self.seed);
        let index = slot_of(
            h,
            *self.pilots.get(bucket_of(h, self.bucket_shift))?,
            self.slot_shift,
        );
        if *self.tags.get(index)? != tag(h) {
            return None;
        }
        self.finish(name, w, index)
    }

    /// Compares `name` with the one in slot `index` and returns its value.
    #[inline(always)]
    fn finish(&self, name: &[u8], w: [u64; 4], index: usize) -> Option<&T> {
        let Line(slot, value) = self.slots.get(index)?;
        // Length and the four words at once, without a branch on the
        // length; only a name over 32 bytes compares the rest.
        let differs = (slot.len as u64 ^ name.len() as u64)
            | (slot.first ^ w[0])
            | (slot.last ^ w[1])
            | (slot.mid.0 ^ w[2])
            | (slot.mid.1 ^ w[3]);
        if differs != 0 {
            return None;
        }
        if name.len() > 32 {
            let start = slot.start as usize;
            let stored = self.names.get(start..start + name.len())?;
            if stored[16..name.len() - 16] != name[16..name.len() - 16] {
                return None;
            }
        }
        value.as_ref()
    }
}

/// Moves each value to the slot its name was placed in.
fn by_slot<T>(values: Vec<T>, slots: &[Option<usize>]) -> Vec<Option<T>> {
    let mut values: Vec<Option<T>> = values.into_iter().map(Some).collect();
    slots
        .iter()
        .map(|s| s.and_then(|i| values[i].take()))
        .collect()
}

/// Places the keys with `hashes` into `slots_len` slots through `buckets`
/// pilots; `None` if some bucket finds no pilot (then the caller retries with
/// another seed).
#[allow(clippy::type_complexity)]
fn place(
    hashes: &[u64],
    buckets: usize,
    bucket_shift: u32,
    slots_len: usize,
    slot_shift: u32,
) -> Option<(Vec<u32>, Vec<Option<usize>>)> {
    // Two equal hashes can never be separated: new seed.
    let mut sorted = hashes.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); buckets];
    for (i, &h) in hashes.iter().enumerate() {
        members[bucket_of(h, bucket_shift)].push(i);
    }
    let mut order: Vec<usize> = (0..buckets).collect();
    order.sort_unstable_by_key(|&b| std::cmp::Reverse(members[b].len()));
    let mut pilots = vec![0u32; buckets];
    let mut slots: Vec<Option<usize>> = vec![None; slots_len];
    let mut tried: Vec<usize> = Vec::new();
    for b in order {
        if members[b].is_empty() {
            break;
        }
        let found = (0..1u32 << 20).find(|&pilot| {
            tried.clear();
            let word = pilot_word(pilot);
            for &i in &members[b] {
                let s = slot_of(hashes[i], word, slot_shift);
                if slots[s].is_some() || tried.contains(&s) {
                    return false;
                }
                tried.push(s);
            }
            true
        })?;
        pilots[b] = found;
        let word = pilot_word(found);
        for &i in &members[b] {
            slots[slot_of(hashes[i], word, slot_shift)] = Some(i);
        }
    }
    Some((pilots, slots))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETH: &[&str] = &[
        "eth_call",
        "eth_getTransactionReceipt",
        "eth_getBalance",
        "eth_blockNumber",
        "eth_getBlockByNumber",
        "eth_getTransactionCount",
        "eth_chainId",
        "eth_getTransactionByHash",
        "eth_getLogs",
        "eth_getCode",
        "eth_estimateGas",
        "eth_sendRawTransaction",
        "eth_getTransactionByBlockHashAndIndex",
        "eth_getTransactionByBlockNumberAndIndex",
        "eth_getBlockTransactionCountByHash",
        "eth_getBlockTransactionCountByNumber",
    ];

    #[test]
    fn one_name() {
        let r = Router::new([("ping", 7)]).unwrap();
        assert_eq!(r.get("ping"), Some(&7));
        for miss in ["", "pin", "pingg", "Ping", "gnip", "ping\0"] {
            assert_eq!(r.get(miss), None, "{miss:?}");
        }
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn ethereum_names_sharing_long_prefixes() {
        let r = Router::new(ETH.iter().enumerate().map(|(i, n)| (*n, i))).unwrap();
        assert!(r.table.direct);
        assert_eq!(r.table.hash, Hash::Ends);
        for (i, n) in ETH.iter().enumerate() {
            assert_eq!(r.get(n), Some(&i), "{n}");
            // Every one-byte change of a registered name misses.
            let mut b = n.as_bytes().to_vec();
            for at in 0..b.len() {
                let orig = b[at];
                b[at] = orig ^ 0x20;
                let changed = String::from_utf8_lossy(&b).into_owned();
                assert_eq!(r.get(&changed), None, "{changed}");
                b[at] = orig;
            }
            assert_eq!(r.get(&n[..n.len() - 1]), None);
            assert_eq!(r.get(&format!("{n}x")), None);
        }
    }

    #[test]
    fn names_equal_at_both_ends_are_hashed_on_four_words() {
        // Up to 32 bytes, the four words hold every byte: no full hashing.
        let names = [
            "prefix_AAAA_middle_one_suffix__",
            "prefix_AAAA_middle_two_suffix__",
            "prefix__x_suffix__",
            "trace_getBlockByNumber",
            "trace_getStateByNumber",
        ];
        let r = Router::new(names.iter().enumerate().map(|(i, n)| (*n, i))).unwrap();
        assert!(!r.table.direct);
        assert_eq!(r.table.hash, Hash::Words);
        for (i, n) in names.iter().enumerate() {
            assert_eq!(r.get(n), Some(&i));
        }
        assert_eq!(r.get("prefix_AAAA_middle_six_suffix__"), None);
        assert_eq!(r.get("trace_getStoreByNumber"), None);
    }

    #[test]
    fn long_names_equal_in_all_four_words_fall_back_to_full_hashing() {
        // 42 bytes, the same first and last 16: the same four words.
        let names: Vec<String> = (0..20)
            .map(|i| format!("namespace_prefix{i:08}suffix_of_the_name"))
            .collect();
        let r = Router::new(names.iter().enumerate().map(|(i, n)| (n.as_str(), i))).unwrap();
        assert_eq!(r.table.hash, Hash::Full);
        for (i, n) in names.iter().enumerate() {
            assert_eq!(r.get(n), Some(&i));
        }
        assert_eq!(r.get("namespace_prefix00000020suffix_of_the_name"), None);
        assert_eq!(r.get("namespace_prefix0000000xsuffix_of_the_name"), None);
    }

    #[test]
    fn words_cover_every_byte_up_to_32() {
        for n in 8..=32usize {
            let name: Vec<u8> = (0..n as u8).map(|i| b'a' + i).collect();
            let w = words(&name);
            for at in 0..n {
                let mut changed = name.clone();
                changed[at] = b'Z';
                assert_ne!(words(&changed), w, "byte {at} of {n}");
            }
        }
    }

    /// Every name of every length from 1 to 48 bytes is found, and every
    /// one-byte change, truncation and extension of it misses, placed
    /// directly and through pilots.
    #[test]
    fn every_length_and_every_position() {
        let names: Vec<String> = (1..=48)
            .flat_map(|len| {
                ["a", "b", "c"].map(|c| {
                    (0..len)
                        .map(|i| (b'a' + ((i * 7 + len) % 26) as u8) as char)
                        .collect::<String>()
                        + c
                })
            })
            .collect();
        let small: Vec<&str> = names.iter().map(String::as_str).step_by(3).collect();
        let all: Vec<&str> = names.iter().map(String::as_str).collect();
        for (set, direct) in [(&small, true), (&all, false)] {
            let r = Router::new(set.iter().enumerate().map(|(i, n)| (*n, i))).unwrap();
            assert_eq!(r.table.direct, direct);
            for (i, n) in set.iter().enumerate() {
                assert_eq!(r.get(n), Some(&i), "{n}");
                let mut b = n.as_bytes().to_vec();
                for at in 0..b.len() {
                    let orig = b[at];
                    for flip in [0x01, 0x20, 0x40] {
                        b[at] = orig ^ flip;
                        let changed = std::str::from_utf8(&b).unwrap();
                        if !set.contains(&changed) {
                            assert_eq!(r.get(changed), None, "{changed}");
                        }
                    }
                    b[at] = orig;
                }
                for miss in [&n[..n.len() - 1], &format!("{n}a"), &format!("a{n}")] {
                    if !set.contains(&miss) {
                        assert_eq!(r.get(miss), None, "{miss}");
                    }
                }
            }
        }
    }

    /// Random sets over a two-letter alphabet (names that differ in few
    /// bytes, sharing their ends) against a `HashMap`.
    #[test]
    fn agrees_with_a_hash_map_on_random_names() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let name = |next: &mut dyn FnMut() -> u64| -> String {
            let len = 1 + (next() % 40) as usize;
            (0..len)
                .map(|_| if next() & 1 == 0 { 'x' } else { 'y' })
                .collect()
        };
        for size in [1, 5, 40, 128, 129, 700] {
            let mut map = std::collections::HashMap::new();
            while map.len() < size {
                let n = name(&mut next);
                let v = map.len();
                map.entry(n).or_insert(v);
            }
            let r = Router::new(map.iter().map(|(k, v)| (k.as_str(), *v))).unwrap();
            assert_eq!(r.len(), size);
            for _ in 0..5000 {
                let probe = name(&mut next);
                assert_eq!(r.get(&probe), map.get(&probe), "{probe}");
                assert_eq!(r.index_of(&probe).is_some(), map.contains_key(&probe));
            }
            for (i, (k, v)) in map.iter().enumerate() {
                assert_eq!(r.get(k), Some(v));
                assert_eq!(r.index_of(k), Some(i), "{k}");
            }
        }
    }

    #[test]
    fn ten_thousand_names() {
        let names: Vec<String> = (0..10_000)
            .map(|i| format!("ns{}_method_{i:05}", i % 17))
            .collect();
        let r = Router::new(names.iter().enumerate().map(|(i, n)| (n.as_str(), i))).unwrap();
        assert_eq!(r.len(), 10_000);
        for (i, n) in names.iter().enumerate() {
            assert_eq!(r.get(n), Some(&i));
            assert_eq!(r.index_of(n), Some(i));
        }
        for i in 10_000..20_000 {
            assert_eq!(r.get(&format!("ns{}_method_{i:05}", i % 17)), None);
            assert_eq!(r.index_of(&format!("ns{}_method_{i:05}", i % 17)), None);
        }
        assert_eq!(r.iter().count(), 10_000);
        // Same-length names differing only in the middle: four words.
        let mid: Vec<String> = (0..10_000)
            .map(|i| format!("eth_{i:05}_zzzzzzzz"))
            .collect();
        let r = Router::new(mid.iter().enumerate().map(|(i, n)| (n.as_str(), i))).unwrap();
        assert_eq!(r.table.hash, Hash::Words);
        for (i, n) in mid.iter().enumerate() {
            assert_eq!(r.get(n), Some(&i));
        }
    }

    #[test]
    fn rejects_duplicates_reserved_and_empty_names() {
        assert_eq!(
            Router::new([("a", 1), ("b", 2), ("a", 3)]).unwrap_err(),
            BuildError::Duplicate("a".into())
        );
        assert_eq!(
            Router::new([("rpc.discover", 1)]).unwrap_err(),
            BuildError::Reserved("rpc.discover".into())
        );
        assert_eq!(Router::new([("", 1)]).unwrap_err(), BuildError::Empty);
        // `rpc` alone, or `rpc.` elsewhere, is an ordinary name.
        assert!(Router::new([("rpc", 1), ("x.rpc.y", 2), ("rpc_modules", 3)]).is_ok());
        let e = Router::new([("rpc.x", 1)]).unwrap_err();
        assert!(e.to_string().contains("reserves"));
        let e = Router::new([("rpc.discover", 1)]).unwrap_err();
        assert!(e.to_string().contains("rpc_discover"), "{e}");
    }

    #[test]
    fn empty_router_finds_nothing() {
        let r: Router<u8> = Router::new(Vec::<(&str, u8)>::new()).unwrap();
        assert!(r.is_empty());
        assert_eq!(r.get("x"), None);
        assert_eq!(r.get(""), None);
    }

    #[test]
    fn shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Router<fn()>>();
        let r = Router::new(ETH.iter().map(|n| (*n, n.len()))).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || ETH.iter().all(|n| r.get(n) == Some(&n.len())))
            })
            .collect();
        assert!(handles.into_iter().all(|h| h.join().unwrap()));
    }
}
