//! A global allocator that counts the allocations made by the current thread
//! while counting is switched on, so that "zero allocation" is measured, and
//! tracks the bytes live on the heap (all threads) and their peak, so that
//! memory bounds are measured too.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct CountingAlloc;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
    /// Bytes allocated by this thread less those it freed.
    static NET: Cell<isize> = const { Cell::new(0) };
}

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn note() {
    // `try_with`: the thread-local may already be gone while a thread exits.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

fn grew(bytes: usize) {
    let _ = NET.try_with(|n| n.set(n.get() + bytes as isize));
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    let _ = NET.try_with(|n| n.set(n.get() - bytes as isize));
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters are const-initialised thread-locals and atomics, which never
// allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        grew(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        grew(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        grew(new_size);
        shrank(layout.size());
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns how many allocations this thread made meanwhile.
pub fn allocations_during<R>(f: impl FnOnce() -> R) -> (usize, R) {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
    let r = f();
    COUNTING.with(|on| on.set(false));
    (COUNT.with(|c| c.get()), r)
}

/// Runs `f` and returns the most heap memory live at any point meanwhile,
/// above what was live when it started (all threads: run such tests in a
/// binary of their own, or serially).
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = f();
    (PEAK.load(Ordering::Relaxed).saturating_sub(base), r)
}

/// Starts measuring peak heap memory (for code that awaits); read it with
/// [`peak_since`].
pub fn start_peak() -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    base
}

/// The most heap memory live since [`start_peak`] returned `base`, above it.
pub fn peak_since(base: usize) -> usize {
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

/// Bytes live on the heap now (all threads).
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Runs `f` and returns the heap bytes this thread allocated meanwhile and
/// did not free (what `f`'s result holds, when `f` allocates only on this
/// thread), whatever other threads do.
pub fn held_after<R>(f: impl FnOnce() -> R) -> (isize, R) {
    let base = NET.with(Cell::get);
    let r = f();
    (NET.with(Cell::get) - base, r)
}
