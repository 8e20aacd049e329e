//! Remote keys (`ucp_rkey_pack`, `ucp_ep_rkey_unpack`, `ucp_rkey_ptr`, …), put and get.
//!
//! Remote keys are unpacked on the endpoint's worker. A packed key is a [`KeyHeader`] followed
//! by rucx's key bundle. Clients name remote memory by their own addresses; the header's
//! `delta` turns them into rucx's (they differ for `UCP_MEM_MAP_FIXED` mappings, see
//! [`crate::mem`]).

mod sgl;

use crate::datatype::{slice, Finish};
use crate::ep::{ep_ref, wait};
use crate::ffi::*;
use crate::guard::{fail, ffi, ffi_hot, refuse};
use crate::handles::{Cb, Context, Ep, OpArgs, Worker};
use crate::mem::{Mem, ACCESS_READ, ACCESS_WRITE};
use crate::request::submit;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use ucp::Rkey;

/// The key of a client key, after the checks every access makes: the key belongs to this
/// worker, it allows the access (`ACCESS_*` bits: a mapping made with
/// `UCP_MEM_MAP_PARAM_FIELD_PROT` and without `UCP_MEM_MAP_PROT_REMOTE_READ`/`_WRITE` packs
/// keys that deny it), and a key of this process's own mapping is refused once that mapping
/// is unmapped. Gives the key and the client-to-rucx address difference, or why the key is
/// refused.
///
/// # Safety
/// A live, non-NULL key from `ucp_ep_rkey_unpack`.
#[inline(always)]
pub(crate) unsafe fn rkey_for_quiet<'a>(
    k: *mut CRkey,
    w: &Worker,
    access: u8,
) -> Result<(&'a Rkey, u64), &'static str> {
    // SAFETY: per the contract.
    let k = unsafe { &*k };
    if !std::ptr::eq(k.worker, w) {
        return Err("rkey was unpacked on an endpoint of another worker");
    }
    if k.deny & access != 0 {
        return Err(if k.deny & access & ACCESS_WRITE != 0 {
            "the key's memory was mapped without UCP_MEM_MAP_PROT_REMOTE_WRITE"
        } else {
            "the key's memory was mapped without UCP_MEM_MAP_PROT_REMOTE_READ"
        });
    }
    if let Some(a) = &k.alive {
        if !a.load(Ordering::Acquire) {
            return Err("rkey names a mapping that was unmapped");
        }
    }
    Ok((&k.rkey, k.delta))
}

/// [`rkey_for_quiet`] for a key that may be NULL, with one log line for a refused key.
///
/// # Safety
/// A live key from `ucp_ep_rkey_unpack`, or NULL.
#[inline]
pub(crate) unsafe fn rkey_for<'a>(
    name: &str,
    k: *mut CRkey,
    w: &Worker,
    access: u8,
) -> Result<(&'a Rkey, u64), Status> {
    if k.is_null() {
        return Err(refuse(name, UCS_ERR_INVALID_PARAM, "rkey is NULL"));
    }
    // SAFETY: per the contract.
    unsafe { rkey_for_quiet(k, w, access) }.map_err(|why| refuse(name, UCS_ERR_INVALID_PARAM, why))
}

/// How long `ucp_ep_rkey_unpack` waits for a connecting endpoint.
const CONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A packed remote-key bundle with no keys (`ucp::RkeyBundle` of no entries).
const EMPTY_BUNDLE: &[u8] = &[0];

/// An unpacked remote key.
pub struct CRkey {
    worker: *const Worker,
    rkey: Rkey,
    /// The owner's client address minus its rucx address (subtracted from client addresses).
    delta: u64,
    /// For a mapping of this process: its liveness flag.
    alive: Option<Arc<AtomicBool>>,
    /// The mapping's owner process and id (`ucp_rkey_compare`).
    owner: (u32, u64),
    /// `ACCESS_*` bits the owner's protection denies.
    deny: u8,
}

impl CRkey {
    /// What names the key's memory: owner process, mapping id, address difference; equal
    /// for keys of the same mapping (`ucp_rkey_compare` orders keys by it).
    pub(crate) fn identity(&self) -> (u32, u64, u64) {
        (self.owner.0, self.owner.1, self.delta)
    }

    /// The worker the key was unpacked on.
    pub(crate) fn worker(&self) -> *const Worker {
        self.worker
    }
}

/// The header rucx puts before a packed remote-key bundle (all little-endian):
///
/// ```text
/// 0           4               12          16              24
/// +-----------+---------------+-----------+---------------+----------------------+
/// | n (u32)   | delta (u64)   | pid (u32) | map id (u64)  | bundle (n - 20 bytes) |
/// +-----------+---------------+-----------+---------------+----------------------+
/// ```
/// `n` counts the bytes after itself (`ucp_ep_rkey_unpack` gets no length); `delta` is the
/// owner's client address minus rucx's address of the memory; `pid` and `map id` name the
/// mapping in its process.
#[derive(Debug, PartialEq, Eq)]
struct KeyHeader {
    delta: u64,
    pid: u32,
    id: u64,
    /// `ACCESS_*` bits the mapping denies, in the map id's top byte (ids stay below 2^56; a
    /// key of full access has 0 there, as keys made before).
    deny: u8,
}

/// Bits of the map-id field that hold the id.
const ID_MASK: u64 = (1 << 56) - 1;

impl KeyHeader {
    const LEN: usize = 24;
    /// Longest bundle accepted.
    const MAX_BUNDLE: usize = 1 << 20;

    fn encode(&self, bundle: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN + bundle.len());
        ucs::codec::Writer::new(&mut v)
            .u32((Self::LEN - 4 + bundle.len()) as u32)
            .u64(self.delta)
            .u32(self.pid)
            .u64((self.id & ID_MASK) | (self.deny as u64) << 56)
            .bytes(bundle);
        v
    }

    /// Decodes the header from its first `LEN` bytes; gives it and the bundle's length.
    fn decode(h: &[u8; Self::LEN]) -> Result<(Self, usize), String> {
        use ucs::codec::{u32_at, u64_at};
        let n = u32_at(h, 0) as usize;
        if n < Self::LEN - 4 || n - (Self::LEN - 4) > Self::MAX_BUNDLE {
            return Err(format!("not a rucx remote key (length {n})"));
        }
        Ok((
            KeyHeader {
                delta: u64_at(h, 4),
                pid: u32_at(h, 12),
                id: u64_at(h, 16) & ID_MASK,
                deny: (u64_at(h, 16) >> 56) as u8,
            },
            n - (Self::LEN - 4),
        ))
    }
}

/// `ucs_status_t ucp_rkey_pack(ucp_context_h context, ucp_mem_h memh, void **rkey_buffer_p,
/// size_t *size_p)`.
///
/// # Safety
/// A live handle and writable pointers.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_pack(
    context: *mut Context,
    memh: *mut Mem,
    rkey_buffer_p: *mut *mut c_void,
    size_p: *mut usize,
) -> Status {
    const NAME: &str = "ucp_rkey_pack";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if memh.is_null() || rkey_buffer_p.is_null() || size_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: a live handle.
        let m = unsafe { &mut *memh };
        if let Err(s) = crate::mem::bound(NAME, m) {
            return s;
        }
        // SAFETY: its worker is alive.
        let w = unsafe { &*m.worker };
        let _g = w.lock.lock();
        // A zero-length mapping packs a bundle of no keys, which reaches no memory.
        let bundle = m.map.as_ref().map_or(EMPTY_BUNDLE, |map| map.rkey_packed());
        if !std::ptr::eq(m.context, context) && !context.is_null() {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "memh was mapped by another context",
            );
        }
        let key = KeyHeader {
            delta: m.delta,
            pid: std::process::id(),
            id: m.id,
            deny: m.deny,
        }
        .encode(bundle);
        let total = key.len();
        // SAFETY: malloc of a non-zero size, filled below.
        let p = unsafe { libc::malloc(total) } as *mut u8;
        if p.is_null() {
            return UCS_ERR_NO_MEMORY;
        }
        // SAFETY: `p` holds `total` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(key.as_ptr(), p, total);
            *rkey_buffer_p = p.cast();
            *size_p = total;
        }
        UCS_OK
    })
}

/// `void ucp_rkey_buffer_release(void *rkey_buffer)`.
///
/// # Safety
/// A buffer from `ucp_rkey_pack`, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_buffer_release(rkey_buffer: *mut c_void) {
    // SAFETY: malloc'd by ucp_rkey_pack.
    ffi("ucp_rkey_buffer_release", (), || unsafe {
        libc::free(rkey_buffer)
    })
}

/// `ucs_status_t ucp_ep_rkey_unpack(ucp_ep_h ep, const void *rkey_buffer, ucp_rkey_h *rkey_p)`.
///
/// # Safety
/// A live endpoint; a buffer packed by a rucx `ucp_rkey_pack`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_rkey_unpack(
    ep: *mut Ep,
    rkey_buffer: *const c_void,
    rkey_p: *mut *mut CRkey,
) -> Status {
    const NAME: &str = "ucp_ep_rkey_unpack";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let (w, h_ep) = match ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return s,
        };
        if rkey_buffer.is_null() || rkey_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        let mut h = [0u8; KeyHeader::LEN];
        // SAFETY: a packed key starts with its header.
        unsafe { std::ptr::copy_nonoverlapping(rkey_buffer as *const u8, h.as_mut_ptr(), h.len()) };
        let (hdr, len) = match KeyHeader::decode(&h) {
            Ok(x) => x,
            Err(why) => return refuse(NAME, UCS_ERR_INVALID_PARAM, why),
        };
        // SAFETY: the bundle follows the header (its length is in the header).
        let bytes = unsafe { slice((rkey_buffer as *const u8).add(KeyHeader::LEN).cast(), len) };
        let alive = if hdr.pid == std::process::id() {
            match crate::mem::liveness(hdr.id) {
                Some(a) => Some(a),
                None => {
                    return refuse(
                        NAME,
                        UCS_ERR_INVALID_PARAM,
                        "the key's mapping (of this process) is unmapped",
                    )
                }
            }
        } else {
            None
        };
        let _g = w.lock.lock();
        // An endpoint still connecting (tcp) has no lanes to unpack for yet: progress the
        // worker until it has (UCX unpacks at once), for at most CONNECT_WAIT.
        let start = std::time::Instant::now();
        let rkey = loop {
            let r = w.inner.borrow_mut().w.rkey_unpack(h_ep, bytes);
            match r {
                Ok(k) => break k,
                Err(ucs::Error::Busy(_)) if start.elapsed() < CONNECT_WAIT => {
                    w.progress();
                }
                Err(e) => return fail(NAME, &e),
            }
        };
        let k = CRkey {
            worker: w,
            rkey,
            delta: hdr.delta,
            alive,
            owner: (hdr.pid, hdr.id),
            deny: hdr.deny,
        };
        // SAFETY: checked non-null.
        unsafe { *rkey_p = Box::into_raw(Box::new(k)) };
        UCS_OK
    })
}

/// `void ucp_rkey_destroy(ucp_rkey_h rkey)`.
///
/// # Safety
/// A key from `ucp_ep_rkey_unpack`, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_destroy(rkey: *mut CRkey) {
    ffi("ucp_rkey_destroy", (), || {
        if rkey.is_null() {
            return;
        }
        // SAFETY: created by ucp_ep_rkey_unpack.
        let k = unsafe { Box::from_raw(rkey) };
        // SAFETY: the worker outlives its keys.
        let w = unsafe { &*k.worker };
        let _g = w.lock.lock();
        drop(k);
    })
}

/// Starts a put or get.
///
/// # Safety
/// Live endpoint and key; `buffer` valid for `length` bytes until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn rma(
    name: &str,
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    get: bool,
    args: OpArgs,
) -> StatusPtr {
    let (w, h) = match ep_ref(name, ep) {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    if buffer.is_null() && length > 0 {
        return status_ptr(refuse(name, UCS_ERR_INVALID_PARAM, "NULL buffer"));
    }
    let access = if get { ACCESS_READ } else { ACCESS_WRITE };
    // SAFETY: a live key.
    let (k, delta) = match unsafe { rkey_for(name, rkey, w, access) } {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    let remote_addr = remote_addr.wrapping_sub(delta);
    let _g = w.lock.lock();
    let res = {
        let mut i = w.inner.borrow_mut();
        // Peer memory mapped here: one copy now, no request (unless the client wants one).
        if args.caller_req.is_null() && !args.no_imm {
            let done = if get {
                // SAFETY: the client's buffer of `length` bytes.
                unsafe { i.w.get_mapped(h, buffer as *mut u8, length, remote_addr, k) }
            } else {
                // SAFETY: the client's buffer of `length` bytes.
                i.w.put_mapped(h, unsafe { slice(buffer, length) }, remote_addr, k)
            };
            if done.is_some() {
                return status_ptr(UCS_OK);
            }
        }
        if get {
            // SAFETY: the client's buffer stays valid until completion (documented contract).
            unsafe { i.w.get_raw(h, buffer as *mut u8, length, remote_addr, k) }
        } else {
            // SAFETY: the client's buffer of `length` bytes.
            i.w.put(h, unsafe { slice(buffer, length) }, remote_addr, k)
        }
    };
    if let Err(e) = &res {
        tracing::warn!("{name}: {e}");
    }
    submit(name, w, res, &args, Finish::None)
}

/// A put or get of `length` bytes on peer memory mapped here, before any argument parsing:
/// one copy now, on a worker whose client serializes its calls (its lock is disabled). False
/// (nothing done) when the call needs the general path: a locking worker, a NULL argument, a
/// refused key, memory not mapped here, a range outside the mapping, an endpoint that is not
/// ready or has operations queued. The general path then checks the call again and refuses
/// or runs it (a locking worker's copy is made there, under its lock). The direct path calls
/// nothing but the copy.
///
/// # Safety
/// As the put/get calls: a live endpoint and key (or NULL); `buffer` valid for `length` bytes.
#[inline(always)]
unsafe fn direct(
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    get: bool,
) -> bool {
    if ep.is_null() || rkey.is_null() || buffer.is_null() {
        return false;
    }
    // SAFETY: a live endpoint (non-NULL); its worker outlives it.
    let (w, h) = unsafe { (&*(*ep).worker, (*ep).h) };
    if w.lock.is_enabled() {
        return false;
    }
    let access = if get { ACCESS_READ } else { ACCESS_WRITE };
    // SAFETY: a live key (non-NULL).
    let Ok((k, delta)) = (unsafe { rkey_for_quiet(rkey, w, access) }) else {
        return false;
    };
    // SAFETY: the reference lives only during `mapped_range`, which reads the worker's state
    // and reaches no code that could borrow it mutably; `Err` (a mutable borrow is active)
    // sends the call to the general path.
    let Ok(i) = (unsafe { w.inner.try_borrow_unguarded() }) else {
        return false;
    };
    let Some(p) =
        i.w.mapped_range(h, k, remote_addr.wrapping_sub(delta), length)
    else {
        return false;
    };
    // SAFETY: `p..p + length` lies inside the peer's mapping, which stays mapped while the
    // key lives (the client keeps it alive during the call); `buffer` holds `length` bytes.
    unsafe {
        if get {
            ucp::rma::copy(p, buffer as *mut u8, length);
        } else {
            ucp::rma::copy(buffer as *const u8, p, length);
        }
    }
    true
}

/// The general path of `ucp_put_nbi` (`get` false) and `ucp_get_nbi` (`get` true), with its
/// own panic guard: an `extern "C"` function (which never unwinds) of six register
/// arguments, so those calls end with a jump here and their direct path saves no registers.
///
/// # Safety
/// As those functions.
#[cold]
#[inline(never)]
unsafe extern "C" fn rma_nbi(
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    get: bool,
) -> Status {
    let name = if get { "ucp_get_nbi" } else { "ucp_put_nbi" };
    ffi_hot(name, UCS_ERR_NO_MEMORY, || {
        // SAFETY: forwarded.
        nbi(unsafe {
            rma(
                name,
                ep,
                buffer,
                length,
                remote_addr,
                rkey,
                get,
                OpArgs::with_cb(Cb::None, false),
            )
        })
    })
}

/// `ucp_put_nbx` / `ucp_get_nbx` parameters the direct path accepts: no request memory, no
/// `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`, a byte datatype (or none) and host memory (or none); a
/// callback and user data are allowed (they are not used when the call completes at once).
#[inline(always)]
fn nbx_direct_len(count: usize, param: *const RequestParam) -> Option<usize> {
    if param.is_null() {
        return None;
    }
    // SAFETY: the caller's param (non-NULL).
    let p = unsafe { &*param };
    let allowed = UCP_OP_ATTR_FIELD_CALLBACK
        | UCP_OP_ATTR_FIELD_USER_DATA
        | UCP_OP_ATTR_FIELD_DATATYPE
        | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    if p.op_attr_mask & !allowed != 0 {
        return None;
    }
    if p.op_attr_mask & UCP_OP_ATTR_FIELD_MEMORY_TYPE != 0
        && !crate::memtype::cpu_accessible(p.memory_type)
    {
        return None;
    }
    if p.op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE == 0 {
        return Some(count);
    }
    if p.datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_CONTIG {
        return None;
    }
    count.checked_mul((p.datatype >> UCP_DATATYPE_SHIFT) as usize)
}

/// For `_nbi` calls: a request becomes internal (freed at once: it completes on its own, and
/// a flush waits for it).
pub(crate) fn nbi(r: StatusPtr) -> Status {
    if r.is_null() {
        UCS_OK
    } else if ptr_is_err(r) {
        r as isize as Status
    } else {
        // SAFETY: a request just returned; freeing it only drops the callback.
        unsafe { crate::request::ucp_request_free(r) };
        UCS_INPROGRESS
    }
}

/// `ucs_status_t ucp_put_nbi(ucp_ep_h ep, const void *buffer, size_t length,
/// uint64_t remote_addr, ucp_rkey_h rkey)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbi(
    ep: *mut Ep,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    ffi_hot("ucp_put_nbi", UCS_ERR_NO_MEMORY, || {
        let buffer = buffer as *mut c_void;
        // SAFETY: forwarded.
        if unsafe { direct(ep, buffer, length, remote_addr, rkey, false) } {
            return UCS_OK;
        }
        // SAFETY: forwarded.
        unsafe { rma_nbi(ep, buffer, length, remote_addr, rkey, false) }
    })
}

/// `ucs_status_ptr_t ucp_put_nb(ucp_ep_h ep, const void *buffer, size_t length,
/// uint64_t remote_addr, ucp_rkey_h rkey, ucp_send_callback_t cb)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nb(
    ep: *mut Ep,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    cb: Option<SendCb>,
) -> StatusPtr {
    ffi("ucp_put_nb", status_ptr(UCS_ERR_NO_MEMORY), || {
        let args = OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false);
        // SAFETY: forwarded.
        unsafe {
            rma(
                "ucp_put_nb",
                ep,
                buffer as *mut c_void,
                length,
                remote_addr,
                rkey,
                false,
                args,
            )
        }
    })
}

/// `ucs_status_t ucp_put(ucp_ep_h ep, const void *buffer, size_t length, uint64_t remote_addr,
/// ucp_rkey_h rkey)`: blocking until the buffer may be reused (local completion).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_put(
    ep: *mut Ep,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    ffi("ucp_put", UCS_ERR_NO_MEMORY, || {
        let Ok((w, _)) = ep_ref("ucp_put", ep) else {
            return UCS_ERR_INVALID_PARAM;
        };
        // SAFETY: forwarded.
        let r = unsafe {
            rma(
                "ucp_put",
                ep,
                buffer as *mut c_void,
                length,
                remote_addr,
                rkey,
                false,
                OpArgs::with_cb(Cb::None, false),
            )
        };
        wait(w, r)
    })
}

/// `ucs_status_t ucp_get_nbi(ucp_ep_h ep, void *buffer, size_t length, uint64_t remote_addr,
/// ucp_rkey_h rkey)`: the data lands in `buffer` (complete after a flush).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbi(
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    ffi_hot("ucp_get_nbi", UCS_ERR_NO_MEMORY, || {
        // SAFETY: forwarded.
        if unsafe { direct(ep, buffer, length, remote_addr, rkey, true) } {
            return UCS_OK;
        }
        // SAFETY: forwarded.
        unsafe { rma_nbi(ep, buffer, length, remote_addr, rkey, true) }
    })
}

/// `ucs_status_ptr_t ucp_get_nb(ucp_ep_h ep, void *buffer, size_t length, uint64_t remote_addr,
/// ucp_rkey_h rkey, ucp_send_callback_t cb)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nb(
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    cb: Option<SendCb>,
) -> StatusPtr {
    ffi("ucp_get_nb", status_ptr(UCS_ERR_NO_MEMORY), || {
        let args = OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false);
        // SAFETY: forwarded.
        unsafe {
            rma(
                "ucp_get_nb",
                ep,
                buffer,
                length,
                remote_addr,
                rkey,
                true,
                args,
            )
        }
    })
}

/// The byte length of an `_nbx` RMA call's `count` elements (contiguous datatypes only).
fn nbx_len(name: &str, count: usize, nbx: &crate::param::Nbx) -> Result<usize, Status> {
    if nbx.datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_CONTIG {
        return Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            "RMA with a non-contiguous datatype",
        ));
    }
    crate::datatype::contig_len(name, count, nbx.datatype)
}

/// `ucs_status_ptr_t ucp_put_nbx(ucp_ep_h ep, const void *buffer, size_t count,
/// uint64_t remote_addr, ucp_rkey_h rkey, const ucp_request_param_t *param)` (contiguous
/// datatypes).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbx(
    ep: *mut Ep,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> StatusPtr {
    // SAFETY: forwarded.
    unsafe {
        rma_nbx::<false>(
            "ucp_put_nbx",
            ep,
            buffer as *mut c_void,
            count,
            remote_addr,
            rkey,
            param,
        )
    }
}

/// `ucs_status_ptr_t ucp_get_nbx(ucp_ep_h ep, void *buffer, size_t count, uint64_t remote_addr,
/// ucp_rkey_h rkey, const ucp_request_param_t *param)` (contiguous datatypes; the data lands
/// in `buffer`).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbx(
    ep: *mut Ep,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> StatusPtr {
    // SAFETY: forwarded.
    unsafe { rma_nbx::<true>("ucp_get_nbx", ep, buffer, count, remote_addr, rkey, param) }
}

/// The body of `ucp_put_nbx` (`GET` false) and `ucp_get_nbx` (`GET` true): the direct path,
/// else a jump to the general path (one instance each, so each call's panic guard is resolved
/// at compile time).
///
/// # Safety
/// As those functions.
#[inline(always)]
unsafe fn rma_nbx<const GET: bool>(
    name: &'static str,
    ep: *mut Ep,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> StatusPtr {
    let get = GET;
    ffi_hot(name, status_ptr(UCS_ERR_NO_MEMORY), || {
        if let Some(len) = nbx_direct_len(count, param) {
            // SAFETY: forwarded; `len` bytes are the client's `count` elements.
            if unsafe { direct(ep, buffer, len, remote_addr, rkey, get) } {
                return status_ptr(UCS_OK);
            }
        }
        // SAFETY: forwarded.
        unsafe { rma_nbx_general::<GET>(ep, buffer, count, remote_addr, rkey, param) }
    })
}

/// The general path of `ucp_put_nbx` (`GET` false) and `ucp_get_nbx` (`GET` true): the
/// parameter parsed, the call checked and started, panics caught. An `extern "C"` function
/// (which never unwinds) of six register arguments, reached by a jump.
///
/// # Safety
/// As those functions.
#[cold]
#[inline(never)]
unsafe extern "C" fn rma_nbx_general<const GET: bool>(
    ep: *mut Ep,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> StatusPtr {
    let name = if GET { "ucp_get_nbx" } else { "ucp_put_nbx" };
    ffi_hot(name, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        if !GET && unsafe { sgl::wanted(param) } {
            // SAFETY: forwarded (`param` is not NULL).
            return unsafe { sgl::put(name, ep, buffer, count, remote_addr, rkey, param) };
        }
        // SAFETY: forwarded.
        let p = match unsafe { crate::param::parse_param(name, param, true) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let len = match nbx_len(name, count, &p) {
            Ok(l) => l,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: forwarded.
        unsafe { rma(name, ep, buffer, len, remote_addr, rkey, GET, p.send_args()) }
    })
}

/// `ucs_status_t ucp_rkey_ptr(ucp_rkey_h rkey, uint64_t raddr, void **addr_p)`: when the
/// peer's memory is mapped in this process (its shared segment over posix/sysv, or this
/// process's own memory over self), the local address of `raddr`: loads, stores and atomics
/// there reach the peer's memory, for as long as the key lives. `UCS_ERR_UNREACHABLE` when the
/// memory is reachable only through the transport; `UCS_ERR_INVALID_PARAM` (and a log line)
/// for an address outside the mapping.
///
/// # Safety
/// A live key; `addr_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_ptr(
    rkey: *mut CRkey,
    raddr: u64,
    addr_p: *mut *mut c_void,
) -> Status {
    const NAME: &str = "ucp_rkey_ptr";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if rkey.is_null() || addr_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: a live key.
        let k = unsafe { &*rkey };
        // SAFETY: the key's worker outlives it.
        let w = unsafe { &*k.worker };
        // SAFETY: as above.
        // A local pointer reads and writes: both must be allowed.
        let (rk, delta) = match unsafe { rkey_for(NAME, rkey, w, ACCESS_READ | ACCESS_WRITE) } {
            Ok(x) => x,
            Err(s) => return s,
        };
        match rk.local_ptr(raddr.wrapping_sub(delta), 1) {
            Ok(p) => {
                // SAFETY: checked non-null.
                unsafe { *addr_p = p.as_ptr().cast() };
                UCS_OK
            }
            Err(ucs::Error::Unreachable(_)) => UCS_ERR_UNREACHABLE,
            Err(e) => refuse(NAME, UCS_ERR_INVALID_PARAM, e),
        }
    })
}

/// `ucs_status_t ucp_get(ucp_ep_h ep, void *buffer, size_t length, uint64_t remote_addr,
/// ucp_rkey_h rkey)`: blocking until the data is in `buffer`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_get(
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    ffi("ucp_get", UCS_ERR_NO_MEMORY, || {
        let Ok((w, _)) = ep_ref("ucp_get", ep) else {
            return UCS_ERR_INVALID_PARAM;
        };
        // SAFETY: forwarded.
        let r = unsafe {
            rma(
                "ucp_get",
                ep,
                buffer,
                length,
                remote_addr,
                rkey,
                true,
                OpArgs::with_cb(Cb::None, false),
            )
        };
        wait(w, r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_header_round_trip_and_bad_lengths() {
        let h = KeyHeader {
            delta: 0x1234_5678_9abc,
            pid: 77,
            id: 9,
            deny: ACCESS_WRITE,
        };
        let v = h.encode(&[1, 2, 3]);
        assert_eq!(v.len(), KeyHeader::LEN + 3);
        let mut head = [0u8; KeyHeader::LEN];
        head.copy_from_slice(&v[..KeyHeader::LEN]);
        assert_eq!(KeyHeader::decode(&head), Ok((h, 3)));
        head[..4].copy_from_slice(&3u32.to_le_bytes());
        assert!(KeyHeader::decode(&head).is_err(), "shorter than the header");
        head[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(KeyHeader::decode(&head).is_err(), "too long");
    }

    #[test]
    fn empty_bundle_has_no_keys() {
        let b = ucp::rma::RkeyBundle::decode(EMPTY_BUNDLE).expect("decodes");
        assert!(b.entries.is_empty());
    }
}
