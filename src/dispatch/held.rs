//! Messages a transport holds, read but not started, while its connection
//! is at its cap on calls in flight.
//!
//! A cancellation notice read meanwhile ([`cancel_notification`]) may name
//! a request among them, which is then taken out of the queue and answered
//! as cancelled instead of being started once a slot frees. Finding it is
//! a map lookup: each held single request's id is read once, when it is
//! held (a search that parsed every held message for each notice made a
//! client's run of notices naming no held request cost the square of their
//! count: about 40,000 small messages fit in the bound).
//!
//! [`cancel_notification`]: crate::dispatch::DispatcherBuilder::cancel_notification

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use smallvec::SmallVec;

use crate::frame::FrameError;

/// What holding one message costs besides its bytes and its id's (its
/// place in the queue and in the map), counted in [`HeldMessages::bytes`]
/// so that the smallest messages (`{}`) cannot make the queue many times
/// its bound. (A place takes about 100 bytes on 64-bit targets, twice
/// that as the queue doubles: a flood of `{}` makes the queue up to
/// about 3 times the bound, given back once it drains. Counting that
/// would hold a third as many small messages at a bound of a few KiB.)
pub(crate) const HELD_OVERHEAD: usize = 64;

/// Places the queue keeps when it empties: a burst's are given back.
const HELD_KEPT: usize = 64;

/// One place of the queue.
type HeldSlot = (Option<HeldFrame>, Option<HeldId>);

/// A held single request's id, as its JSON text.
pub(crate) type HeldId = SmallVec<[u8; 16]>;

/// The messages held, in order, with the ids of the single requests among
/// them.
#[derive(Debug, Default)]
pub(crate) struct HeldMessages {
    /// In order; `None` for a message a cancellation took (dropped when it
    /// reaches the front), with the id it was held under.
    queue: VecDeque<HeldSlot>,
    /// The position (counted from the first message ever held) of the
    /// queue's front.
    front: u64,
    /// Per id, the positions of the held requests that carry it, oldest
    /// first.
    by_id: HashMap<HeldId, VecDeque<u64>>,
    /// Messages held (not taken).
    live: usize,
    /// What they cost: their bytes, twice their ids' (in the queue and in
    /// the map) and [`HELD_OVERHEAD`] each.
    bytes: usize,
}

fn cost(frame: &Bytes, id: Option<&HeldId>) -> usize {
    frame.len() + HELD_OVERHEAD + 2 * id.map_or(0, |id| id.len())
}

/// A held message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldFrame {
    pub(crate) frame: Bytes,
    /// The answers among its items (a batch's) were handed to the pending
    /// table when it was held: starting it runs only its requests
    /// ([`Connection::start_held`](crate::Connection::start_held)).
    pub(crate) answers_taken: bool,
    /// The peer's ids given when it was read
    /// ([`Connection::note_ids_given`](crate::Connection::note_ids_given)):
    /// its items are read against those when it starts.
    pub(crate) ids_given_below: u64,
    /// Bytes the transport's framer refused there (`frame` is empty): the
    /// refusal is answered in its turn, after the messages read before it,
    /// or dropped with them at a shutdown.
    pub(crate) refused: Option<HeldRefusal>,
}

/// A framer's refusal held in order ([`HeldFrame::refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldRefusal {
    pub(crate) error: FrameError,
    /// The framer gave up there: the connection closes once it is
    /// answered.
    pub(crate) closes: bool,
    /// It was an answer (`Connection::refused_answer`): counted, not
    /// answered.
    pub(crate) answer: bool,
}

// The dispatcher's engine holds messages and takes out those a notice
// cancels; only the transports (feature `server`) start and drop them.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
impl HeldMessages {
    /// Holds `frame`, a single request with id `id` (its JSON text) when
    /// `id` is given, last in order.
    pub(crate) fn push_back(&mut self, mut frame: HeldFrame, id: Option<HeldId>) {
        // A copy: a frame sliced from its read chunk keeps the whole chunk
        // (64 KiB for a `{}`), which the bound on held bytes would not see.
        frame.frame = Bytes::copy_from_slice(&frame.frame);
        self.bytes += cost(&frame.frame, id.as_ref());
        self.live += 1;
        if let Some(id) = &id {
            let at = self.front + self.queue.len() as u64;
            self.by_id.entry(id.clone()).or_default().push_back(at);
        }
        self.queue.push_back((Some(frame), id));
    }

    /// The first message held, taken out.
    pub(crate) fn pop_front(&mut self) -> Option<HeldFrame> {
        while let Some((frame, id)) = self.queue.pop_front() {
            let at = self.front;
            self.front += 1;
            let Some(frame) = frame else { continue };
            if let Some(id) = &id {
                self.forget(id, at);
            }
            self.bytes -= cost(&frame.frame, id.as_ref());
            self.live -= 1;
            self.release();
            return Some(frame);
        }
        None
    }

    /// The first held single request with id `id` (its JSON text), taken
    /// out.
    pub(crate) fn take(&mut self, id: &[u8]) -> Option<Bytes> {
        let positions = self.by_id.get_mut(id)?;
        let at = positions.pop_front()?;
        if positions.is_empty() {
            self.by_id.remove(id);
        }
        let index = usize::try_from(at.checked_sub(self.front)?).ok()?;
        let (frame, held_id) = self.queue.get_mut(index)?;
        let frame = frame.take()?.frame;
        let held_id = held_id.take();
        self.bytes -= cost(&frame, held_id.as_ref());
        self.live -= 1;
        // The last one held, cancelled: its place and those before it go.
        self.release();
        Some(frame)
    }

    fn forget(&mut self, id: &[u8], at: u64) {
        if let Some(positions) = self.by_id.get_mut(id) {
            // Positions leave in order: the front's is first.
            if positions.front() == Some(&at) {
                positions.pop_front();
            }
            if positions.is_empty() {
                self.by_id.remove(id);
            }
        }
    }

    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// What the messages held cost, in bytes (see [`HELD_OVERHEAD`]).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Drops every message held.
    pub(crate) fn clear(&mut self) {
        self.front += self.queue.len() as u64;
        self.queue.clear();
        self.by_id.clear();
        self.live = 0;
        self.bytes = 0;
        self.release();
    }

    /// Gives back the places a burst made the queue and the map grow to,
    /// once nothing is held (places of cancelled messages may remain until
    /// they reach the front): a queue that once held a bound's worth of
    /// `{}` kept its places (hundreds of KiB) for the connection's life.
    fn release(&mut self) {
        if self.live != 0 {
            return;
        }
        if self.queue.capacity() > HELD_KEPT {
            self.front += self.queue.len() as u64;
            self.queue = VecDeque::new();
        }
        if self.by_id.capacity() > HELD_KEPT {
            self.by_id = HashMap::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> Option<HeldId> {
        Some(text.as_bytes().into())
    }

    fn whole(frame: &Bytes) -> HeldFrame {
        HeldFrame {
            frame: frame.clone(),
            answers_taken: false,
            ids_given_below: 0,
            refused: None,
        }
    }

    #[test]
    fn requests_are_taken_by_id_and_the_rest_keep_their_order() {
        let mut held = HeldMessages::default();
        let frames = ["a", "b", "c", "d", "e"].map(|f| Bytes::from_static(f.as_bytes()));
        held.push_back(whole(&frames[0]), id("1"));
        held.push_back(whole(&frames[1]), None);
        held.push_back(whole(&frames[2]), id("\"x\""));
        held.push_back(whole(&frames[3]), id("1"));
        held.push_back(whole(&frames[4]), id("2"));
        let all = held.bytes();
        assert_eq!(all, 5 * (1 + HELD_OVERHEAD) + 2 * (1 + 3 + 1 + 1));
        assert_eq!(held.take(b"9"), None);
        // The first of two with one id, then the second.
        assert_eq!(held.take(b"1"), Some(frames[0].clone()));
        assert_eq!(held.take(b"\"x\""), Some(frames[2].clone()));
        assert_eq!(held.bytes(), all - 2 * (1 + HELD_OVERHEAD) - 2 * (1 + 3));
        assert_eq!(held.pop_front(), Some(whole(&frames[1])));
        assert_eq!(held.take(b"1"), Some(frames[3].clone()));
        assert_eq!(held.take(b"1"), None);
        assert!(!held.is_empty());
        assert_eq!(held.pop_front(), Some(whole(&frames[4])));
        assert_eq!(held.take(b"2"), None, "started: not held any more");
        assert!(held.is_empty());
        assert_eq!(held.bytes(), 0);
        assert_eq!(held.pop_front(), None);
        assert!(held.by_id.is_empty());
        // Positions go on counting after a clear.
        held.push_back(whole(&frames[0]), id("1"));
        held.clear();
        held.push_back(whole(&frames[1]), id("1"));
        assert_eq!(held.take(b"1"), Some(frames[1].clone()));
        assert!(held.is_empty());
    }

    /// A burst held and then started (or dropped) leaves the queue and the
    /// map near their floor: 100,000 `{}` kept about 10 MiB of places.
    #[test]
    fn places_of_a_burst_are_given_back() {
        let mut held = HeldMessages::default();
        let frame = Bytes::from_static(b"{}");
        for round in 0..3 {
            for n in 0..100_000 {
                let text = n.to_string();
                held.push_back(whole(&frame), id(&text));
            }
            assert!(held.queue.capacity() >= 100_000);
            assert!(held.bytes() >= 100_000 * (2 + HELD_OVERHEAD));
            // One taken by a cancellation, the rest started or dropped,
            // or (the last round) all but one started and the last one
            // cancelled.
            assert_eq!(held.take(b"5"), Some(frame.clone()));
            match round {
                0 => while held.pop_front().is_some() {},
                1 => held.clear(),
                _ => {
                    for _ in 0..100_000 - 2 {
                        assert!(held.pop_front().is_some());
                    }
                    assert_eq!(held.take(b"99999"), Some(frame.clone()));
                }
            }
            assert!(held.is_empty());
            assert_eq!(held.bytes(), 0);
            assert!(
                held.queue.capacity() <= HELD_KEPT,
                "{}",
                held.queue.capacity()
            );
            assert!(
                held.by_id.capacity() <= HELD_KEPT,
                "{}",
                held.by_id.capacity()
            );
        }
        // Positions go on: a request held now is still found by its id.
        held.push_back(whole(&frame), id("7"));
        assert_eq!(held.take(b"7"), Some(frame.clone()));
    }
}
