//! A pool of fixed-size buffers with a free list, for bcopy send buffers and receive descriptors.
//!
//! Like UCX's `ucs_mpool`: buffers are carved out of chunks allocated `bufs_per_chunk` at a time,
//! up to `max_bufs`; beyond that [`MemPool::get`] gives `None`, which callers turn into
//! back-pressure (`NoResource`). A buffer is an owned handle, [`PoolBuf`], that returns itself to
//! the pool when dropped (UCX's "keep the descriptor, release it later", made safe). Once the pool
//! has grown to its working size, `get` and drop allocate nothing: the free list is a stack of
//! pointers whose capacity was reserved when the chunk was added.
//!
//! The pool is single-threaded (`Rc`): each worker owns its pools.

use crate::status::{Error, Result};
use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::rc::Rc;

/// How a [`MemPool`] is shaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemPoolConfig {
    /// Name for logs and errors (`"tcp rx"`, `"posix bcopy"`…).
    pub name: &'static str,
    /// Usable bytes per buffer.
    pub buf_size: usize,
    /// Alignment of every buffer's start; a power of two.
    pub align: usize,
    /// Buffers added per growth step.
    pub bufs_per_chunk: usize,
    /// Most buffers the pool will ever hold (`usize::MAX` for no limit).
    pub max_bufs: usize,
}

impl Default for MemPoolConfig {
    fn default() -> Self {
        MemPoolConfig {
            name: "mpool",
            buf_size: 8192,
            align: 64,
            bufs_per_chunk: 16,
            max_bufs: usize::MAX,
        }
    }
}

struct Inner {
    cfg: MemPoolConfig,
    /// Distance between buffer starts: `buf_size` rounded up to `align`.
    stride: usize,
    free: RefCell<Vec<NonNull<u8>>>,
    chunks: RefCell<Vec<(NonNull<u8>, Layout)>>,
    total: Cell<usize>,
}

impl Inner {
    /// Adds one chunk; false when at `max_bufs` or out of memory.
    fn grow(&self) -> bool {
        let total = self.total.get();
        let n = self
            .cfg
            .bufs_per_chunk
            .min(self.cfg.max_bufs.saturating_sub(total));
        if n == 0 {
            return false;
        }
        let Some(layout) = self
            .stride
            .checked_mul(n)
            .and_then(|bytes| Layout::from_size_align(bytes, self.cfg.align).ok())
        else {
            tracing::warn!(pool = self.cfg.name, n, "chunk size overflows");
            return false;
        };
        let mut free = self.free.borrow_mut();
        let mut chunks = self.chunks.borrow_mut();
        if free.try_reserve(n).is_err() || chunks.try_reserve(1).is_err() {
            tracing::warn!(pool = self.cfg.name, "out of memory growing the free list");
            return false;
        }
        // SAFETY: `layout` has a non-zero size (stride > 0 and n > 0, checked in `new` and
        // above). Zeroed memory makes every byte initialized, so handing it out as `[u8]` is
        // sound.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(base) = NonNull::new(base) else {
            tracing::warn!(
                pool = self.cfg.name,
                bytes = layout.size(),
                "out of memory growing the pool"
            );
            return false;
        };
        chunks.push((base, layout));
        // Push in reverse so buffers come out in address order.
        for i in (0..n).rev() {
            // SAFETY: `i * stride < layout.size()`, so the offset stays inside the allocation.
            free.push(unsafe { NonNull::new_unchecked(base.as_ptr().add(i * self.stride)) });
        }
        self.total.set(total + n);
        true
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Every `PoolBuf` holds an `Rc<Inner>`, so when `Inner` drops no buffer is in use.
        for (base, layout) in self.chunks.get_mut().drain(..) {
            // SAFETY: `base` came from `alloc_zeroed(layout)` in `grow` and is freed once.
            unsafe { std::alloc::dealloc(base.as_ptr(), layout) };
        }
    }
}

/// A pool of fixed-size buffers. Cloning gives another handle to the same pool.
#[derive(Clone)]
pub struct MemPool {
    inner: Rc<Inner>,
}

impl fmt::Debug for MemPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemPool")
            .field("name", &self.inner.cfg.name)
            .field("buf_size", &self.inner.cfg.buf_size)
            .field("allocated", &self.allocated())
            .field("available", &self.available())
            .finish()
    }
}

impl MemPool {
    /// An empty pool; buffers are allocated on first use (or by [`MemPool::reserve`]). Gives
    /// [`Error::InvalidParam`] for a zero `buf_size` or `bufs_per_chunk`, an alignment that is
    /// not a power of two, or a chunk too large to allocate.
    pub fn new(cfg: MemPoolConfig) -> Result<Self> {
        let bad = |why: String| Err(Error::InvalidParam(format!("mpool '{}': {why}", cfg.name)));
        if cfg.buf_size == 0 {
            return bad("buf_size must be at least 1".into());
        }
        if cfg.bufs_per_chunk == 0 {
            return bad("bufs_per_chunk must be at least 1".into());
        }
        if !cfg.align.is_power_of_two() {
            return bad(format!("align {} is not a power of two", cfg.align));
        }
        let stride = match cfg.buf_size.checked_next_multiple_of(cfg.align) {
            Some(s) => s,
            None => return bad(format!("buf_size {} is too large", cfg.buf_size)),
        };
        let chunk_bufs = cfg.bufs_per_chunk.min(cfg.max_bufs.max(1));
        if stride
            .checked_mul(chunk_bufs)
            .and_then(|b| Layout::from_size_align(b, cfg.align).ok())
            .is_none()
        {
            return bad(format!(
                "a chunk of {chunk_bufs} buffers of {} bytes is too large",
                cfg.buf_size
            ));
        }
        Ok(MemPool {
            inner: Rc::new(Inner {
                cfg,
                stride,
                free: RefCell::new(Vec::new()),
                chunks: RefCell::new(Vec::new()),
                total: Cell::new(0),
            }),
        })
    }

    /// Takes a buffer, growing the pool by a chunk if the free list is empty. `None` when the
    /// pool holds `max_bufs` buffers and all are in use (or memory ran out): back-pressure.
    /// Allocates nothing when a free buffer exists. The contents are whatever the last user
    /// left (zero for a fresh buffer).
    #[inline]
    pub fn get(&self) -> Option<PoolBuf> {
        let popped = self.inner.free.borrow_mut().pop();
        let ptr = match popped {
            Some(p) => p,
            None => {
                if !self.inner.grow() {
                    return None;
                }
                self.inner.free.borrow_mut().pop()?
            }
        };
        Some(PoolBuf {
            ptr,
            pool: Rc::clone(&self.inner),
        })
    }

    /// Grows the pool until it holds at least `n` buffers, so later `get`s do not allocate.
    /// Gives [`Error::InvalidParam`] if `n` exceeds `max_bufs`, [`Error::NoMemory`] if memory
    /// runs out.
    pub fn reserve(&self, n: usize) -> Result<()> {
        if n > self.inner.cfg.max_bufs {
            return Err(Error::InvalidParam(format!(
                "mpool '{}': cannot reserve {n} buffers, the maximum is {}",
                self.inner.cfg.name, self.inner.cfg.max_bufs
            )));
        }
        while self.inner.total.get() < n {
            if !self.inner.grow() {
                return Err(Error::NoMemory(format!(
                    "mpool '{}': growing to {n} buffers of {} bytes",
                    self.inner.cfg.name, self.inner.cfg.buf_size
                )));
            }
        }
        Ok(())
    }

    /// Usable bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.cfg.buf_size
    }
    /// The pool's name.
    pub fn name(&self) -> &'static str {
        self.inner.cfg.name
    }
    /// Buffers allocated so far (free and in use).
    pub fn allocated(&self) -> usize {
        self.inner.total.get()
    }
    /// Buffers on the free list.
    pub fn available(&self) -> usize {
        self.inner.free.borrow().len()
    }
    /// Buffers handed out and not yet returned.
    pub fn in_use(&self) -> usize {
        self.allocated() - self.available()
    }
    /// Number of chunks allocated so far.
    pub fn chunks(&self) -> usize {
        self.inner.chunks.borrow().len()
    }
}

/// A buffer from a [`MemPool`]; derefs to its `buf_size` bytes and returns to the pool on drop.
pub struct PoolBuf {
    ptr: NonNull<u8>,
    pool: Rc<Inner>,
}

impl PoolBuf {
    /// Start of the buffer (aligned to the pool's `align`).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
    /// Start of the buffer, writable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// Whether this buffer came from `pool`.
    pub fn is_from(&self, pool: &MemPool) -> bool {
        Rc::ptr_eq(&self.pool, &pool.inner)
    }
}

impl Deref for PoolBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points at `buf_size` initialized bytes inside a chunk that lives as long
        // as the pool, which this handle keeps alive; the free list handed the pointer to this
        // handle alone, so no other reference to these bytes exists.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.pool.cfg.buf_size) }
    }
}

impl DerefMut for PoolBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.pool.cfg.buf_size) }
    }
}

impl Drop for PoolBuf {
    #[inline]
    fn drop(&mut self) {
        // Capacity for every buffer was reserved in `grow`, so this push never allocates.
        self.pool.free.borrow_mut().push(self.ptr);
    }
}

impl fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PoolBuf({}: {:p}+{})",
            self.pool.cfg.name, self.ptr, self.pool.cfg.buf_size
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(buf_size: usize, per_chunk: usize, max: usize) -> MemPool {
        MemPool::new(MemPoolConfig {
            name: "test",
            buf_size,
            align: 64,
            bufs_per_chunk: per_chunk,
            max_bufs: max,
        })
        .unwrap()
    }

    #[test]
    fn bad_config_is_an_error() {
        for cfg in [
            MemPoolConfig {
                buf_size: 0,
                ..Default::default()
            },
            MemPoolConfig {
                bufs_per_chunk: 0,
                ..Default::default()
            },
            MemPoolConfig {
                align: 48,
                ..Default::default()
            },
            MemPoolConfig {
                buf_size: usize::MAX - 3,
                ..Default::default()
            },
        ] {
            assert!(matches!(MemPool::new(cfg), Err(Error::InvalidParam(_))));
        }
    }

    #[test]
    fn grows_in_chunks_up_to_max_then_none() {
        let p = pool(100, 4, 10);
        assert_eq!(p.allocated(), 0);
        let mut held = Vec::new();
        for i in 0..10 {
            held.push(p.get().expect("below max"));
            assert_eq!(p.allocated(), ((i / 4 + 1) * 4).min(10));
        }
        assert_eq!(p.allocated(), 10, "last chunk is cut to max_bufs");
        assert_eq!(p.chunks(), 3);
        assert!(p.get().is_none(), "beyond max_bufs");
        assert_eq!(p.in_use(), 10);
        held.pop();
        assert!(p.get().is_some(), "a returned buffer can be taken again");
    }

    #[test]
    fn buffers_are_aligned_sized_distinct_and_keep_data() {
        let p = pool(100, 8, usize::MAX);
        let mut bufs: Vec<PoolBuf> = (0..20).map(|_| p.get().unwrap()).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            assert_eq!(b.len(), 100);
            assert_eq!(b.as_ptr() as usize % 64, 0);
            assert!(b.is_from(&p));
            b.fill(i as u8);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(b.iter().all(|&x| x == i as u8), "buffers overlap");
        }
        let mut addrs: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
        addrs.sort_unstable();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 100));
    }

    #[test]
    fn returned_buffer_is_reused_lifo_without_growing() {
        let p = pool(64, 4, usize::MAX);
        p.reserve(4).unwrap();
        assert_eq!(p.chunks(), 1);
        let a = p.get().unwrap();
        let addr = a.as_ptr();
        drop(a);
        for _ in 0..1000 {
            let b = p.get().unwrap();
            assert_eq!(
                b.as_ptr(),
                addr,
                "most recently freed buffer comes back first"
            );
        }
        assert_eq!(p.chunks(), 1);
        assert_eq!(p.allocated(), 4);
        assert_eq!(p.available(), 4);
    }

    #[test]
    fn buffer_outlives_pool_handle() {
        let p = pool(32, 2, 2);
        let mut b = p.get().unwrap();
        drop(p);
        b[31] = 7;
        assert_eq!(b[31], 7);
    }

    #[test]
    fn reserve_checks_max() {
        let p = pool(32, 3, 5);
        assert!(matches!(p.reserve(6), Err(Error::InvalidParam(_))));
        p.reserve(5).unwrap();
        assert_eq!(p.allocated(), 5);
        assert_eq!(p.available(), 5);
    }
}
