//! Test support: bytes placed so that the slice ends (or starts) at a page
//! next to one that cannot be read, so that a kernel reading one byte past
//! its slice faults instead of reading a neighbour's bytes. The SIMD
//! scanners' tails and the hex kernels' overlapping loads are checked
//! with it at every length.

unsafe extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, offset: i64) -> *mut u8;
    fn mprotect(addr: *mut u8, len: usize, prot: i32) -> i32;
    fn munmap(addr: *mut u8, len: usize) -> i32;
    fn sysconf(name: i32) -> i64;
}

const PROT_NONE: i32 = 0;
const PROT_READ_WRITE: i32 = 0x1 | 0x2;
/// `MAP_PRIVATE | MAP_ANONYMOUS` on Linux (x86_64 and aarch64 alike).
const MAP_PRIVATE_ANONYMOUS: i32 = 0x02 | 0x20;
/// `_SC_PAGESIZE` on Linux (x86_64 and aarch64 alike).
const SC_PAGESIZE: i32 = 30;
/// A guard page, two pages of data, a guard page.
const PAGES: usize = 4;

/// The kernel's page size: 4 KiB, or 16 or 64 KiB on some aarch64
/// kernels, where `mprotect` needs addresses aligned to it.
fn page_size() -> usize {
    // SAFETY: `sysconf` reads a constant of the system.
    let size = unsafe { sysconf(SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s >= 4096)
        .unwrap_or(4096)
}

/// Two readable pages between two unreadable ones.
pub(crate) struct Guarded {
    base: *mut u8,
    page: usize,
}

impl Guarded {
    pub(crate) fn new() -> Guarded {
        let page = page_size();
        // SAFETY: an anonymous private mapping of our own; its first and
        // last pages are made unreadable, nothing else is touched.
        unsafe {
            let base = mmap(
                std::ptr::null_mut(),
                PAGES * page,
                PROT_READ_WRITE,
                MAP_PRIVATE_ANONYMOUS,
                -1,
                0,
            );
            assert!(!base.is_null() && base as isize != -1, "mmap failed");
            assert_eq!(mprotect(base, page, PROT_NONE), 0);
            assert_eq!(mprotect(base.add(3 * page), page, PROT_NONE), 0);
            Guarded { base, page }
        }
    }

    /// `bytes`, copied so that its last byte is the last readable one.
    pub(crate) fn at_end(&mut self, bytes: &[u8]) -> &[u8] {
        assert!(bytes.len() <= 2 * self.page);
        // SAFETY: the destination lies within the two readable pages
        // (`3 * page - len >= page`), which `&mut self` lends out once.
        unsafe {
            let at = self.base.add(3 * self.page - bytes.len());
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
            std::slice::from_raw_parts(at, bytes.len())
        }
    }

    /// `bytes`, copied so that its first byte is the first readable one.
    pub(crate) fn at_start(&mut self, bytes: &[u8]) -> &[u8] {
        assert!(bytes.len() <= 2 * self.page);
        // SAFETY: as in `at_end`: `page + len <= 3 * page`.
        unsafe {
            let at = self.base.add(self.page);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
            std::slice::from_raw_parts(at, bytes.len())
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer lent out.
        unsafe { munmap(self.base, PAGES * self.page) };
    }
}
