//! Endpoints (`uct_ep_h`): create, connect, destroy, and the operations table's active
//! message, flush, fence and pending entries (put, get and atomics are in [`crate::rma`]).
//!
//! The C handle points to an [`Ep`], `repr(C)` with its interface first, as `uct_ep_t`: the
//! header-inline `uct_ep_am_short(ep, …)` calls `ep->iface->ops.ep_am_short(ep, …)`. Results
//! map as UCX documents them: done is `UCS_OK` (a bcopy gives its length), started with a
//! completion to come is `UCS_INPROGRESS`, back-pressure is `UCS_ERR_NO_RESOURCE`.

use crate::addr_slot;
use crate::ffi::*;
use crate::guard::{fail, ffi, hot, outcome, refuse};
use crate::handle::{slice_or_empty, Ep, Iface, State};
use crate::mem::{Memh, Rkey};
use std::ffi::{c_uint, c_void};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use uct::Endpoint as _;
use uct::{AnyEp, CompletionId, Iface as _, Iov, MemHandle, MemoryDomain, Outcome, PendingId};

/// Most pieces a zero-copy operation takes (the `max_iov` reported is at most this).
pub const MAX_IOV: usize = 16;

/// Serial numbers of endpoints, so a remote key resolved for one is never taken for another
/// that reuses its memory.
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// The endpoint and its interface's state behind a C handle.
///
/// # Safety
/// `ep` must be a live endpoint handle.
#[inline(always)]
pub(crate) unsafe fn parts<'a>(ep: *mut c_void) -> (&'a mut Ep, &'a State) {
    // SAFETY: forwarded from the caller; the interface outlives its endpoints.
    unsafe {
        let e = &mut *ep.cast::<Ep>();
        let st = &(*e.iface).st;
        (e, st)
    }
}

/// The remote key of `rkey`, resolved for `e`.
#[inline(always)]
pub(crate) fn key<'a>(e: &mut Ep, rkey: usize) -> Result<&'a uct::RemoteKey, ucs::Error> {
    // SAFETY: the client passes a key from uct_rkey_unpack, used from one thread.
    let k = unsafe { Rkey::from_rkey(rkey) }
        .ok_or_else(|| ucs::Error::InvalidParam(format!("invalid remote key {rkey:#x}")))?;
    // SAFETY: no other resolution of this key is under way (single-threaded use).
    unsafe { k.resolve(e.serial, &mut e.ep) }
}

/// Zero-copy pieces of a C `uct_iov_t` array: the memory handles (registered on the fly for
/// pieces without one) and the pieces, on the stack.
pub(crate) struct Pieces {
    handles: [Option<MemHandle>; MAX_IOV],
    spans: [(usize, usize, usize); MAX_IOV],
    n: usize,
}

impl Pieces {
    /// Reads `cnt` C iovs (each `count` elements `stride` apart).
    ///
    /// # Safety
    /// `iov` must hold `cnt` entries describing memory valid until the operation completes.
    pub(crate) unsafe fn new(
        dom: &uct::AnyMd,
        iov: *const uct_iov_t,
        cnt: usize,
    ) -> ucs::Result<Pieces> {
        let mut p = Pieces {
            handles: Default::default(),
            spans: [(0, 0, 0); MAX_IOV],
            n: 0,
        };
        if cnt > 0 && iov.is_null() {
            return Err(ucs::Error::InvalidParam("NULL iov".into()));
        }
        for i in 0..cnt {
            // SAFETY: the caller gave cnt entries.
            let v = unsafe { &*iov.add(i) };
            let count = (v.count as usize).max(1);
            for j in 0..count {
                if p.n == MAX_IOV {
                    return Err(ucs::Error::InvalidParam(format!(
                        "more than {MAX_IOV} iov pieces"
                    )));
                }
                let addr = (v.buffer as usize).wrapping_add(j.wrapping_mul(v.stride));
                // SAFETY: NULL or a live handle from this library.
                let memh = match unsafe { Memh::from_handle(v.memh) } {
                    Some(m) => m.memh.clone(),
                    None if v.length == 0 => continue,
                    None => {
                        let ptr = std::ptr::NonNull::new(addr as *mut u8)
                            .ok_or_else(|| ucs::Error::InvalidParam("NULL iov buffer".into()))?;
                        // SAFETY: UCX's contract: the memory stays until the operation completes.
                        unsafe { dom.mem_reg(ptr, v.length)? }
                    }
                };
                let off = addr.wrapping_sub(memh.addr() as usize);
                memh.range(off, v.length)?;
                p.handles[p.n] = Some(memh);
                p.spans[p.n] = (p.n, off, v.length);
                p.n += 1;
            }
        }
        Ok(p)
    }

    /// Calls `f` with the pieces as rucx iovs.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&[Iov<'_>]) -> R) -> R {
        let mut arr: [MaybeUninit<Iov<'_>>; MAX_IOV] = [const { MaybeUninit::uninit() }; MAX_IOV];
        for (slot, &(h, off, len)) in arr.iter_mut().zip(&self.spans[..self.n]) {
            let memh = self.handles[h].as_ref().expect("filled with its span");
            slot.write(Iov::new(memh, off, len).expect("range checked in new"));
        }
        // SAFETY: the first n entries were written above; Iov is Copy (no drop).
        let iovs = unsafe { std::slice::from_raw_parts(arr.as_ptr().cast::<Iov<'_>>(), self.n) };
        f(iovs)
    }
}

// ---- active messages ---------------------------------------------------------------------

/// Ops `ep_am_short`.
pub(crate) unsafe extern "C" fn ep_am_short(
    ep: *mut c_void,
    id: u8,
    header: u64,
    payload: *const c_void,
    length: c_uint,
) -> Status {
    hot("uct_ep_am_short", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint and `length` bytes of payload.
        let (e, _) = unsafe { parts(ep) };
        // SAFETY: as above.
        let data = unsafe { slice_or_empty(payload.cast(), length as usize) };
        outcome(e.ep.am_short(id, header, data), "uct_ep_am_short")
    })
}

/// Ops `ep_am_short` of the shared-memory interfaces (posix and sysv: [`crate::iface::ops_for`]
/// puts it in their tables). Their endpoints are all mm's, so the call goes straight to mm's
/// `am_short`, whose code alone is inlined here; the general [`ep_am_short`] dispatches over
/// every transport and pays for their registers and stack on every call (`ucx_perftest -t
/// am_bw -x posix -d memory -s 8`, callgrind, inclusive per call: 105 instructions there, 84
/// here; UCX 1.22's `uct_mm_ep_am_short` 76). The panic guard ([`hot`]) costs nothing on this
/// path (84 with or without it). An endpoint of another kind, which these interfaces never
/// make, takes the general way.
pub(crate) unsafe extern "C" fn ep_am_short_mm(
    ep: *mut c_void,
    id: u8,
    header: u64,
    payload: *const c_void,
    length: c_uint,
) -> Status {
    hot("uct_ep_am_short", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint and `length` bytes of payload.
        let (e, _) = unsafe { parts(ep) };
        // SAFETY: as above.
        let data = unsafe { slice_or_empty(payload.cast(), length as usize) };
        let r = match &mut e.ep {
            AnyEp::Posix(m) | AnyEp::Sysv(m) => m.am_short(id, header, data),
            other => am_short_other(other, id, header, data),
        };
        outcome(r, "uct_ep_am_short")
    })
}

/// [`ep_am_short_mm`]'s way for an endpoint that is not mm's, kept out of its code.
#[cold]
#[inline(never)]
fn am_short_other(ep: &mut AnyEp, id: u8, header: u64, data: &[u8]) -> ucs::Result<Outcome> {
    ep.am_short(id, header, data)
}

/// Ops `ep_am_short_iov`.
pub(crate) unsafe extern "C" fn ep_am_short_iov(
    ep: *mut c_void,
    id: u8,
    iov: *const uct_iov_t,
    iovcnt: usize,
) -> Status {
    hot("uct_ep_am_short_iov", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        if iovcnt > MAX_IOV || (iovcnt > 0 && iov.is_null()) {
            return refuse(
                "uct_ep_am_short_iov",
                UCS_ERR_INVALID_PARAM,
                format!("{iovcnt} iov entries (at most {MAX_IOV})"),
            );
        }
        let mut parts_: [&[u8]; MAX_IOV] = [&[]; MAX_IOV];
        for (i, slot) in parts_.iter_mut().enumerate().take(iovcnt) {
            // SAFETY: the caller gave iovcnt entries with their buffers.
            let v = unsafe { &*iov.add(i) };
            // SAFETY: as above.
            *slot = unsafe { slice_or_empty(v.buffer.cast(), v.length) };
        }
        outcome(
            e.ep.am_short_iov(id, &parts_[..iovcnt]),
            "uct_ep_am_short_iov",
        )
    })
}

/// Runs a client pack callback into rucx's buffer; gives the length it wrote.
pub(crate) fn pack_into(
    buf: &mut [u8],
    pack: uct_pack_callback_t,
    arg: *mut c_void,
    packed: &mut usize,
) -> usize {
    // SAFETY: the client's pack callback writes at most max_bcopy bytes, the buffer's size.
    let n = unsafe { pack(buf.as_mut_ptr().cast(), arg) };
    let n = if n > buf.len() {
        tracing::error!(
            "pack callback wrote {n} bytes into a {}-byte buffer (max_bcopy)",
            buf.len()
        );
        buf.len()
    } else {
        n
    };
    *packed = n;
    n
}

pub(crate) fn bcopy_result(r: ucs::Result<Outcome<usize>>, packed: usize, name: &str) -> isize {
    match r {
        Ok(Outcome::Done(n)) => n as isize,
        Ok(Outcome::InProgress) => packed as isize,
        Ok(Outcome::NoResource) => UCS_ERR_NO_RESOURCE as isize,
        Err(e) => fail(name, &e) as isize,
    }
}

/// Ops `ep_am_bcopy`: gives the packed length, or a negative status.
pub(crate) unsafe extern "C" fn ep_am_bcopy(
    ep: *mut c_void,
    id: u8,
    pack: Option<uct_pack_callback_t>,
    arg: *mut c_void,
    _flags: c_uint,
) -> isize {
    hot("uct_ep_am_bcopy", UCS_ERR_IO_ERROR as isize, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        let Some(pack) = pack else {
            return refuse(
                "uct_ep_am_bcopy",
                UCS_ERR_INVALID_PARAM,
                "NULL pack callback",
            ) as isize;
        };
        let mut packed = 0;
        let r =
            e.ep.am_bcopy(id, |buf| pack_into(buf, pack, arg, &mut packed));
        bcopy_result(r, packed, "uct_ep_am_bcopy")
    })
}

/// Ops `ep_am_zcopy`.
pub(crate) unsafe extern "C" fn ep_am_zcopy(
    ep: *mut c_void,
    id: u8,
    header: *const c_void,
    header_length: c_uint,
    iov: *const uct_iov_t,
    iovcnt: usize,
    _flags: c_uint,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_am_zcopy", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint, a header of header_length bytes and iovs.
        let (e, st) = unsafe { parts(ep) };
        // SAFETY: as above.
        let hdr = unsafe { slice_or_empty(header.cast(), header_length as usize) };
        // SAFETY: as above.
        match unsafe { Pieces::new(&st.dom, iov, iovcnt) } {
            Ok(p) => p.with(|v| {
                outcome(
                    e.ep.am_zcopy(id, hdr, v, CompletionId(comp as u64)),
                    "uct_ep_am_zcopy",
                )
            }),
            Err(err) => fail("uct_ep_am_zcopy", &err),
        }
    })
}

// ---- flush, fence, pending ---------------------------------------------------------------

/// Ops `ep_flush`: `UCS_OK` when everything issued on the endpoint completed, else
/// `UCS_INPROGRESS` (with `comp` completed later) or `UCS_ERR_NO_RESOURCE`. Without a `comp`
/// the caller polls (see [`crate::sink::poll_flush`]).
pub(crate) unsafe extern "C" fn ep_flush(
    ep: *mut c_void,
    _flags: c_uint,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_flush", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, st) = unsafe { parts(ep) };
        if comp.is_null() {
            let Ep {
                ep, polled_flush, ..
            } = e;
            return crate::sink::poll_flush(st, polled_flush, "uct_ep_flush", |id| ep.flush(id));
        }
        outcome(e.ep.flush(CompletionId(comp as u64)), "uct_ep_flush")
    })
}

/// Ops `ep_fence`.
pub(crate) unsafe extern "C" fn ep_fence(ep: *mut c_void, _flags: c_uint) -> Status {
    hot("uct_ep_fence", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        match e.ep.fence() {
            Ok(()) => UCS_OK,
            Err(err) => fail("uct_ep_fence", &err),
        }
    })
}

/// Ops `ep_pending_add`: queues `req` until send resources return (its `func` is then called
/// from progress); `UCS_ERR_BUSY` when resources are available now (send instead).
pub(crate) unsafe extern "C" fn ep_pending_add(
    ep: *mut c_void,
    req: *mut uct_pending_req_t,
    _flags: c_uint,
) -> Status {
    hot("uct_ep_pending_add", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        // SAFETY: checked for NULL before reading func.
        if req.is_null() || unsafe { (*req).func }.is_none() {
            return refuse(
                "uct_ep_pending_add",
                UCS_ERR_INVALID_PARAM,
                "NULL request or callback",
            );
        }
        match e.ep.pending_add(PendingId(req as u64)) {
            Ok(()) => UCS_OK,
            Err(ucs::Error::Busy(_)) => UCS_ERR_BUSY,
            Err(err) => fail("uct_ep_pending_add", &err),
        }
    })
}

/// Ops `ep_pending_purge`: removes every queued request, passing each to `cb`.
pub(crate) unsafe extern "C" fn ep_pending_purge(
    ep: *mut c_void,
    cb: Option<uct_pending_purge_callback_t>,
    arg: *mut c_void,
) {
    hot("uct_ep_pending_purge", (), || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        e.ep.pending_purge(&mut |id| {
            if let Some(cb) = cb {
                // SAFETY: the client's callback with its own request.
                unsafe { cb(id.0 as *mut uct_pending_req_t, arg) };
            }
        });
    })
}

// ---- create, connect, destroy ------------------------------------------------------------

/// `ucs_status_t uct_ep_create(const uct_ep_params_t *params, uct_ep_h *ep_p)`: connected to
/// a peer interface (`DEV_ADDR` and `IFACE_ADDR`), or unconnected, for
/// `uct_ep_connect_to_ep` (neither).
///
/// # Safety
/// `params` valid, with addresses of the lengths `uct_iface_query` gives; `ep_p` writable.
#[no_mangle]
pub unsafe extern "C" fn uct_ep_create(
    params: *const uct_ep_params_t,
    ep_p: *mut *mut c_void,
) -> Status {
    const NAME: &str = "uct_ep_create";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if params.is_null() || ep_p.is_null() {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "NULL parameters or output pointer",
            );
        }
        // SAFETY: checked non-null.
        let p = unsafe { &*params };
        if p.field_mask & UCT_EP_PARAM_FIELD_IFACE == 0 {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "UCT_EP_PARAM_FIELD_IFACE is required",
            );
        }
        // SAFETY: the client's interface handle.
        let Some(it) = (unsafe { Iface::from_handle(NAME, p.iface) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        let (dev, ifa) = (
            p.field_mask & UCT_EP_PARAM_FIELD_DEV_ADDR != 0,
            p.field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR != 0,
        );
        // SAFETY: single-threaded use.
        let iface = match unsafe { it.iface_mut(NAME) } {
            Ok(i) => i,
            Err(s) => return s,
        };
        let a = &*it.st.attr;
        let r = match (dev, ifa) {
            (true, true) => {
                if p.dev_addr.is_null() || (p.iface_addr.is_null() && a.iface_addr_len > 0) {
                    return refuse(
                        NAME,
                        UCS_ERR_INVALID_PARAM,
                        "NULL device or interface address",
                    );
                }
                // SAFETY: the peer's addresses have this library's lengths.
                let (d, i) = unsafe {
                    (
                        slice_or_empty(p.dev_addr, a.device_addr_len),
                        slice_or_empty(p.iface_addr, a.iface_addr_len),
                    )
                };
                match (addr_slot::read(d), addr_slot::read(i)) {
                    (Ok(d), Ok(i)) => iface.ep_create_connected(d, i),
                    (Err(why), _) | (_, Err(why)) => Err(uct::Error::Wire(why)),
                }
            }
            (false, false) => iface.ep_create(),
            _ => {
                return refuse(
                    NAME,
                    UCS_ERR_INVALID_PARAM,
                    "give both DEV_ADDR and IFACE_ADDR, or neither",
                )
            }
        };
        match r {
            Ok(ep) => {
                let id = uct::Endpoint::id(&ep);
                let user_data = if p.field_mask & UCT_EP_PARAM_FIELD_USER_DATA != 0 {
                    p.user_data
                } else {
                    std::ptr::null_mut()
                };
                let e = Box::into_raw(Box::new(Ep {
                    iface: p.iface.cast(),
                    ep,
                    serial: SERIAL.fetch_add(1, Ordering::Relaxed),
                    user_data,
                    id,
                    polled_flush: std::cell::Cell::new(None),
                }));
                it.st.eps.borrow_mut().insert(id, e);
                // SAFETY: checked non-null.
                unsafe { *ep_p = e.cast() };
                UCS_OK
            }
            Err(err) => fail(NAME, &err),
        }
    })
}

/// `void uct_ep_destroy(uct_ep_h ep)` (also of an endpoint its closed interface detached).
///
/// # Safety
/// `ep` must come from [`uct_ep_create`] (or be NULL) and not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uct_ep_destroy(ep: *mut c_void) {
    ffi("uct_ep_destroy", (), || {
        if ep.is_null() {
            return;
        }
        // SAFETY: made by Box::into_raw in uct_ep_create.
        let e = unsafe { Box::from_raw(ep.cast::<Ep>()) };
        if !e.iface.is_null() {
            // SAFETY: a non-null interface is live (uct_iface_close detaches its endpoints).
            unsafe { &(*e.iface).st }.eps.borrow_mut().remove(&e.id);
        }
        drop(e);
    })
}

/// `ucs_status_t uct_ep_get_address(uct_ep_h ep, uct_ep_addr_t *addr)`.
///
/// # Safety
/// `ep` live; `addr` holds `ep_addr_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn uct_ep_get_address(ep: *mut c_void, addr: *mut u8) -> Status {
    ffi("uct_ep_get_address", UCS_ERR_INVALID_PARAM, || {
        if ep.is_null() || addr.is_null() {
            return refuse(
                "uct_ep_get_address",
                UCS_ERR_INVALID_PARAM,
                "NULL endpoint or buffer",
            );
        }
        // SAFETY: the caller passes a live endpoint.
        let (e, st) = unsafe { parts(ep) };
        match e.ep.ep_address() {
            Ok(a) if a.len() <= st.attr.ep_addr_len => {
                // SAFETY: the caller's buffer holds ep_addr_len >= a.len() bytes.
                unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), addr, a.len()) };
                UCS_OK
            }
            Ok(a) => refuse(
                "uct_ep_get_address",
                UCS_ERR_IO_ERROR,
                format!(
                    "address of {} bytes, {} announced",
                    a.len(),
                    st.attr.ep_addr_len
                ),
            ),
            Err(err) => fail("uct_ep_get_address", &err),
        }
    })
}

/// `ucs_status_t uct_ep_connect_to_ep(uct_ep_h ep, const uct_device_addr_t *dev_addr,
/// const uct_ep_addr_t *ep_addr)`.
///
/// # Safety
/// `ep` live; the addresses of the lengths `uct_iface_query` gives.
#[no_mangle]
pub unsafe extern "C" fn uct_ep_connect_to_ep(
    ep: *mut c_void,
    dev_addr: *const u8,
    ep_addr: *const u8,
) -> Status {
    ffi("uct_ep_connect_to_ep", UCS_ERR_INVALID_PARAM, || {
        if ep.is_null() || ep_addr.is_null() {
            return refuse(
                "uct_ep_connect_to_ep",
                UCS_ERR_INVALID_PARAM,
                "NULL endpoint or address",
            );
        }
        // SAFETY: the caller passes a live endpoint.
        let (e, st) = unsafe { parts(ep) };
        let a = &*st.attr;
        // SAFETY: the peer's addresses have this library's lengths.
        let (d, p) = unsafe {
            (
                slice_or_empty(dev_addr, a.device_addr_len),
                slice_or_empty(ep_addr, a.ep_addr_len),
            )
        };
        let d = match addr_slot::read(d) {
            Ok(d) => d,
            Err(why) => return fail("uct_ep_connect_to_ep", &uct::Error::Wire(why)),
        };
        match e.ep.connect_to_ep(d, p) {
            Ok(()) => UCS_OK,
            Err(err) => fail("uct_ep_connect_to_ep", &err),
        }
    })
}

/// Ops `ep_create`.
pub(crate) unsafe extern "C" fn ep_create_op(
    params: *const uct_ep_params_t,
    ep_p: *mut *mut c_void,
) -> Status {
    // SAFETY: forwarded from the caller.
    unsafe { uct_ep_create(params, ep_p) }
}

/// Ops `ep_destroy`.
pub(crate) unsafe extern "C" fn ep_destroy_op(ep: *mut c_void) {
    // SAFETY: forwarded from the caller.
    unsafe { uct_ep_destroy(ep) }
}

/// Ops `ep_get_address`.
pub(crate) unsafe extern "C" fn ep_get_address_op(ep: *mut c_void, addr: *mut u8) -> Status {
    // SAFETY: forwarded from the caller.
    unsafe { uct_ep_get_address(ep, addr) }
}

/// Ops `ep_connect_to_ep`.
pub(crate) unsafe extern "C" fn ep_connect_to_ep_op(
    ep: *mut c_void,
    dev_addr: *const u8,
    ep_addr: *const u8,
) -> Status {
    // SAFETY: forwarded from the caller.
    unsafe { uct_ep_connect_to_ep(ep, dev_addr, ep_addr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(
        buffer: *mut u8,
        length: usize,
        memh: *mut c_void,
        stride: usize,
        count: u32,
    ) -> uct_iov_t {
        uct_iov_t {
            buffer: buffer.cast(),
            length,
            memh,
            stride,
            count,
        }
    }

    #[test]
    fn iovs_expand_strides_register_missing_handles_and_check_ranges() {
        let dom = uct::AnyMd::open("self", "memory0").unwrap();
        let mut buf = vec![0u8; 4096];
        let p = buf.as_mut_ptr();
        // SAFETY: buf outlives the handle.
        let memh = unsafe { dom.mem_reg(std::ptr::NonNull::new(p).unwrap(), buf.len()) }.unwrap();
        let h = Box::into_raw(Box::new(Memh {
            memh,
            origin: crate::mem::Origin::Registered,
        }));
        // Three 10-byte elements 100 bytes apart, then a piece without a handle.
        // SAFETY: offsets inside buf.
        let v = [
            iov(unsafe { p.add(8) }, 10, h.cast(), 100, 3),
            iov(unsafe { p.add(2000) }, 50, std::ptr::null_mut(), 0, 1),
        ];
        // SAFETY: two valid entries.
        let pieces = unsafe { Pieces::new(&dom, v.as_ptr(), 2) }.unwrap();
        pieces.with(|iovs| {
            let got: Vec<_> = iovs
                .iter()
                .map(|i| (i.ptr() as usize - p as usize, i.len()))
                .collect();
            assert_eq!(got, [(8, 10), (108, 10), (208, 10), (2000, 50)]);
        });
        // A piece past the end of its handle's memory is refused.
        // SAFETY: the pointer is only compared, never dereferenced.
        let bad = [iov(unsafe { p.add(4090) }, 10, h.cast(), 0, 1)];
        assert!(matches!(
            // SAFETY: one entry.
            unsafe { Pieces::new(&dom, bad.as_ptr(), 1) },
            Err(ucs::Error::InvalidParam(_))
        ));
        // More pieces than MAX_IOV are refused.
        let many = [iov(p, 1, h.cast(), 1, MAX_IOV as u32 + 1)];
        // SAFETY: one entry.
        assert!(unsafe { Pieces::new(&dom, many.as_ptr(), 1) }.is_err());
        // SAFETY: made above.
        drop(unsafe { Box::from_raw(h) });
    }
}
