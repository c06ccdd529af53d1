//! Memory pool: 64-byte aligned byte buffers in size classes, with bounded free lists.
//!
//! Size classes are four per power of two (64, 80, 96, 112, 128, 160, …), so a buffer wastes at
//! most 25 % of its capacity (the original Harp rounded to powers of two, up to 2x). A [`Buf`]
//! returns itself to its pool when dropped; the pool keeps it if the class's free list and the
//! pool's byte budget allow, otherwise frees it. A class keeps at least `max_free_per_class`
//! buffers and, for small classes, as many as fit in `max_bytes_per_class`: a table of many
//! small partitions is dropped and built again without the system allocator. Every buffer's
//! bytes are always initialised (fresh buffers are zeroed), so handing out a reused buffer
//! never exposes uninitialised memory.
//!
//! One pool belongs to one worker (no process-wide pool), so several workers in one process
//! (Hadoop's local mode) never share state.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Alignment of every pooled buffer (a cache line; enough for any SIMD type we use).
pub const ALIGN: usize = 64;
const MIN_CLASS_SHIFT: u32 = 6; // 64 bytes
const CLASSES: usize = 4 * 42; // up to 2^48 bytes

/// Limits of a pool's free lists.
#[derive(Debug, Clone, Copy)]
pub struct PoolConfig {
    /// A size class keeps this many free buffers, or more while they add up to at most
    /// `max_bytes_per_class`.
    pub max_free_per_class: usize,
    /// Bytes a size class of small buffers may keep (see `max_free_per_class`).
    pub max_bytes_per_class: u64,
    /// At most this many bytes are kept in all free lists together.
    pub max_bytes_held: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_free_per_class: 256,
            max_bytes_per_class: 1 << 20,
            max_bytes_held: 4 << 30,
        }
    }
}

impl PoolConfig {
    /// How many free buffers of `cap` bytes one size class keeps.
    fn keep(&self, cap: usize) -> usize {
        let by_bytes = usize::try_from(self.max_bytes_per_class / cap.max(1) as u64);
        self.max_free_per_class.max(by_bytes.unwrap_or(usize::MAX))
    }
}

/// Counters of a pool. `allocations` counts buffers obtained from the system allocator;
/// `reuses` counts requests served from a free list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub allocations: u64,
    pub reuses: u64,
    pub releases_kept: u64,
    pub releases_freed: u64,
    pub bytes_held: u64,
    pub bytes_in_use: u64,
}

struct Raw {
    ptr: NonNull<u8>,
    cap: usize,
}
// SAFETY: a Raw is an exclusively owned heap allocation; nothing else aliases it.
unsafe impl Send for Raw {}

/// The free buffers of one size class, with the counters only its lock's holder changes.
#[derive(Default)]
struct Class {
    bufs: Vec<Raw>,
    /// How many free buffers this class keeps ([`PoolConfig::keep`], computed once).
    keep: usize,
    reuses: u64,
    kept: u64,
    /// Bytes of this class's buffers handed out and not yet returned.
    in_use: u64,
}

struct Inner {
    cfg: PoolConfig,
    free: Vec<Mutex<Class>>,
    allocations: AtomicU64,
    freed: AtomicU64,
    held: AtomicU64,
}

impl Inner {
    fn class(&self, class: usize) -> std::sync::MutexGuard<'_, Class> {
        self.free[class].lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A handle to a pool; cheap to clone (all clones share the same free lists).
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new(PoolConfig::default())
    }
}

/// Index of the smallest class whose size is >= `size`.
fn class_of(size: usize) -> usize {
    if size <= 1 << MIN_CLASS_SHIFT {
        return 0;
    }
    // 2^e < size <= 2^(e+1)
    let e = usize::BITS - 1 - (size - 1).leading_zeros();
    let quarter = 1usize << (e - 2);
    let m = (size - (1usize << e)).div_ceil(quarter); // 1..=4
    (e - MIN_CLASS_SHIFT) as usize * 4 + m
}

fn class_size(class: usize) -> usize {
    let e = MIN_CLASS_SHIFT as usize + class / 4;
    (1usize << e) + (class % 4) * (1usize << (e - 2))
}

impl Pool {
    /// Whether `other` is this very pool (a clone of it), not just an equal one.
    pub fn same(&self, other: &Pool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub fn new(cfg: PoolConfig) -> Self {
        Pool {
            inner: Arc::new(Inner {
                cfg,
                free: (0..CLASSES)
                    .map(|c| {
                        Mutex::new(Class {
                            keep: cfg.keep(class_size(c)),
                            ..Class::default()
                        })
                    })
                    .collect(),
                allocations: AtomicU64::new(0),
                freed: AtomicU64::new(0),
                held: AtomicU64::new(0),
            }),
        }
    }

    /// A buffer of `len` bytes. Its contents are whatever the previous user left (or zeros).
    /// An empty buffer does not touch the pool.
    pub fn get(&self, len: usize) -> Buf {
        if len == 0 {
            return Buf::empty();
        }
        let class = class_of(len.max(1));
        assert!(
            class < CLASSES,
            "buffer of {len} bytes is larger than the pool supports"
        );
        let cap = class_size(class);
        let inner = &self.inner;
        let reused = {
            let mut list = inner.class(class);
            let raw = list.bufs.pop();
            list.reuses += raw.is_some() as u64;
            list.in_use += cap as u64;
            raw
        };
        let raw = match reused {
            Some(raw) => {
                inner.held.fetch_sub(cap as u64, Relaxed);
                raw
            }
            None => {
                inner.allocations.fetch_add(1, Relaxed);
                let layout = Layout::from_size_align(cap, ALIGN).expect("valid layout");
                // SAFETY: layout has non-zero size.
                let ptr = unsafe { alloc_zeroed(layout) };
                let ptr =
                    NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
                Raw { ptr, cap }
            }
        };
        Buf {
            raw: Some(raw),
            len,
            pool: Some(self.inner.clone()),
        }
    }

    /// A buffer of `len` zero bytes.
    pub fn get_zeroed(&self, len: usize) -> Buf {
        let mut b = self.get(len);
        b.as_mut_slice().fill(0);
        b
    }

    /// A pooled copy of `bytes`.
    pub fn copy_of(&self, bytes: &[u8]) -> Buf {
        let mut b = self.get(bytes.len());
        b.as_mut_slice().copy_from_slice(bytes);
        b
    }

    pub fn stats(&self) -> PoolStats {
        let i = &self.inner;
        let (mut reuses, mut kept, mut in_use) = (0, 0, 0);
        for c in 0..CLASSES {
            let list = i.class(c);
            reuses += list.reuses;
            kept += list.kept;
            in_use += list.in_use;
        }
        PoolStats {
            allocations: i.allocations.load(Relaxed),
            reuses,
            releases_kept: kept,
            releases_freed: i.freed.load(Relaxed),
            bytes_held: i.held.load(Relaxed),
            bytes_in_use: in_use,
        }
    }

    /// Frees every buffer kept in the free lists, and has the system allocator hand its free
    /// memory back to the operating system (glibc keeps freed blocks below its mmap threshold,
    /// and the heap around them, for later allocations: after a job's loading that is often
    /// more than the job then uses). The allocator's part covers the whole process.
    pub fn trim(&self) {
        for c in 0..CLASSES {
            let drained = std::mem::take(&mut self.inner.class(c).bufs);
            for raw in drained {
                self.inner.held.fetch_sub(raw.cap as u64, Relaxed);
                free_raw(raw);
            }
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free memory of glibc's heaps to the system; it
        // touches no allocated block.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for class in &mut self.free {
            let list = class.get_mut().unwrap_or_else(|e| e.into_inner());
            for raw in std::mem::take(&mut list.bufs) {
                free_raw(raw);
            }
        }
    }
}

fn free_raw(raw: Raw) {
    let layout = Layout::from_size_align(raw.cap, ALIGN).expect("valid layout");
    // SAFETY: allocated in `Pool::get` with this exact layout and not freed since.
    unsafe { dealloc(raw.ptr.as_ptr(), layout) }
}

/// An owned, 64-byte aligned byte buffer from a [`Pool`]; returns to the pool on drop.
pub struct Buf {
    raw: Option<Raw>,
    len: usize,
    pool: Option<Arc<Inner>>,
}

impl Buf {
    /// A zero-length buffer that belongs to no pool.
    pub fn empty() -> Buf {
        Buf {
            raw: None,
            len: 0,
            pool: None,
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn capacity(&self) -> usize {
        self.raw.as_ref().map_or(0, |r| r.cap)
    }
    pub fn as_slice(&self) -> &[u8] {
        let Some(raw) = self.raw.as_ref() else {
            // SAFETY: zero-length slice at an aligned, non-null address (so typed views of an
            // empty buffer are aligned too).
            return unsafe {
                std::slice::from_raw_parts(NonNull::<u64>::dangling().as_ptr() as *const u8, 0)
            };
        };
        // SAFETY: ptr points to `cap >= len` initialised bytes owned by this Buf.
        unsafe { std::slice::from_raw_parts(raw.ptr.as_ptr(), self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let Some(raw) = self.raw.as_ref() else {
            // SAFETY: as in `as_slice`.
            return unsafe {
                std::slice::from_raw_parts_mut(NonNull::<u64>::dangling().as_ptr() as *mut u8, 0)
            };
        };
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(raw.ptr.as_ptr(), self.len) }
    }
    /// Raw pointer to the first byte (stable for the buffer's life; used for zero-copy views).
    pub fn as_ptr(&self) -> *const u8 {
        self.raw
            .as_ref()
            .map_or(NonNull::<u64>::dangling().as_ptr() as *const u8, |r| {
                r.ptr.as_ptr()
            })
    }
    /// The pool this buffer returns to (`None` for an empty buffer).
    pub fn pool(&self) -> Option<Pool> {
        self.pool.clone().map(|inner| Pool { inner })
    }
    /// Shrinks the visible length (capacity is kept).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let (Some(raw), Some(pool)) = (self.raw.take(), self.pool.take()) else {
            return;
        };
        let cap = raw.cap;
        let class = class_of(cap);
        let mut list = pool.class(class);
        list.in_use -= cap as u64;
        let fits_budget = pool.held.load(Relaxed) + cap as u64 <= pool.cfg.max_bytes_held;
        if list.bufs.len() < list.keep && fits_budget {
            list.bufs.push(raw);
            list.kept += 1;
            pool.held.fetch_add(cap as u64, Relaxed);
        } else {
            drop(list);
            pool.freed.fetch_add(1, Relaxed);
            free_raw(raw);
        }
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}
impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}
impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buf({} of {} bytes)", self.len, self.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_monotonic_and_tight() {
        let mut prev = 0;
        for c in 0..60 {
            let s = class_size(c);
            assert!(s > prev, "class {c}");
            assert_eq!(class_of(s), c, "size {s}");
            assert_eq!(class_of(s + 1), c + 1, "size {}", s + 1);
            if c > 4 {
                assert!((s as f64) / (class_size(c - 1) as f64) <= 1.25 + 1e-9);
            }
            prev = s;
        }
        assert_eq!(class_of(1), 0);
        assert_eq!(class_size(0), 64);
    }

    #[test]
    fn buffers_are_aligned_reused_and_counted() {
        let pool = Pool::default();
        let a = pool.get(1000);
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        assert_eq!(a.len(), 1000);
        assert!(a.capacity() >= 1000 && a.capacity() <= 1250);
        let p = a.as_ptr();
        drop(a);
        let s = pool.stats();
        assert_eq!((s.allocations, s.reuses, s.releases_kept), (1, 0, 1));
        assert_eq!(s.bytes_in_use, 0);
        let b = pool.get(990); // same class
        assert_eq!(b.as_ptr(), p);
        assert_eq!(pool.stats().reuses, 1);
        assert_eq!(pool.stats().bytes_held, 0);
    }

    #[test]
    fn free_lists_are_bounded() {
        let pool = Pool::new(PoolConfig {
            max_free_per_class: 2,
            max_bytes_per_class: 0,
            max_bytes_held: 1 << 20,
        });
        let bufs: Vec<Buf> = (0..5).map(|_| pool.get(100)).collect();
        drop(bufs);
        let s = pool.stats();
        assert_eq!(s.releases_kept, 2);
        assert_eq!(s.releases_freed, 3);
        let big = pool.get(2 << 20);
        drop(big); // over the byte budget
        assert_eq!(pool.stats().releases_freed, 4);
        pool.trim();
        assert_eq!(pool.stats().bytes_held, 0);
    }

    #[test]
    fn small_classes_keep_up_to_their_byte_bound() {
        let pool = Pool::new(PoolConfig {
            max_free_per_class: 2,
            max_bytes_per_class: 1000,
            max_bytes_held: 1 << 20,
        });
        // 100 bytes are in the 112-byte class: 1000 / 112 = 8 are kept, not 2.
        let bufs: Vec<Buf> = (0..10).map(|_| pool.get(100)).collect();
        drop(bufs);
        assert_eq!(pool.stats().releases_kept, 8);
        assert_eq!(pool.stats().releases_freed, 2);
        assert_eq!(pool.stats().bytes_held, 8 * 112);
        // Large classes keep max_free_per_class.
        let bufs: Vec<Buf> = (0..5).map(|_| pool.get(4000)).collect();
        drop(bufs);
        assert_eq!(pool.stats().releases_kept, 10);
        let again: Vec<Buf> = (0..10).map(|_| pool.get(100)).collect();
        assert_eq!(pool.stats().reuses, 8);
        assert_eq!(pool.stats().allocations, 10 + 5 + 2);
        drop(again);
    }

    #[test]
    fn empty_buffers_bypass_the_pool() {
        let pool = Pool::default();
        let e = pool.get(0);
        assert!(e.is_empty() && e.as_slice().is_empty());
        assert_eq!(e.as_ptr() as usize % 8, 0);
        assert_eq!(e.as_slice().as_ptr() as usize % 8, 0);
        let a = crate::data::Array::from_buf(crate::data::DType::F64, pool.get(0)).unwrap();
        assert!(a.as_slice::<f64>().unwrap().is_empty());
        drop(e);
        assert_eq!(pool.stats(), PoolStats::default());
    }

    #[test]
    fn fresh_buffers_are_zeroed() {
        let pool = Pool::default();
        let mut a = pool.get(256);
        assert!(a.iter().all(|&b| b == 0));
        a.fill(7);
        drop(a);
        assert!(pool.get_zeroed(256).iter().all(|&b| b == 0));
    }
}
