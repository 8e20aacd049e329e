//! Thin libibverbs bindings, loaded at run time from `libibverbs.so.1` (the only place in rucx
//! with verbs `extern` calls).
//!
//! Loading at run time (instead of linking) lets every rucx binary start on machines without RDMA
//! libraries. The `#[repr(C)]` types ([`abi`]) mirror rdma-core's `<infiniband/verbs.h>` for the
//! fields we use, with their sizes and offsets checked by its layout tests against the header's
//! values. The `static inline` verbs of the header (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`) go through the context's ops table, exactly as the header
//! does. With libibverbs present but no kernel RDMA support, `ibv_get_device_list` returns NULL
//! with `errno == ENOSYS`: [`device_list`] reports that as its own error so callers can say why.

#![allow(non_camel_case_types, missing_docs, dead_code)]

use libloading::Library;
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::{Arc, OnceLock};

pub mod abi;

pub use abi::*;

/// The libibverbs functions rucx calls, resolved once from `libibverbs.so.1`.
pub struct Verbs {
    _lib: Library,
    /// `ibv_get_device_list`.
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    /// `ibv_free_device_list`.
    pub free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    /// `ibv_open_device`.
    pub open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    /// `ibv_close_device`.
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    /// `ibv_query_device`.
    pub query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    /// `ibv_query_port`.
    pub query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    /// `ibv_query_gid`.
    pub query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    /// `ibv_alloc_pd`.
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    /// `ibv_dealloc_pd`.
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    /// `ibv_reg_mr`.
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    /// `ibv_dereg_mr`.
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    /// `ibv_create_comp_channel`.
    pub create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    /// `ibv_destroy_comp_channel`.
    pub destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    /// `ibv_create_cq`.
    pub create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
    /// `ibv_destroy_cq`.
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    /// `ibv_get_cq_event`.
    pub get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    /// `ibv_ack_cq_events`.
    pub ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, c_uint),
    /// `ibv_create_qp`.
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    /// `ibv_modify_qp`.
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    /// `ibv_destroy_qp`.
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    /// `ibv_create_ah`.
    pub create_ah: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah,
    /// `ibv_destroy_ah`.
    pub destroy_ah: unsafe extern "C" fn(*mut ibv_ah) -> c_int,
}

static VERBS: OnceLock<Result<Verbs, String>> = OnceLock::new();

/// The loaded library, or why it could not be loaded (cached: tried once per process).
pub fn verbs() -> Result<&'static Verbs, String> {
    VERBS.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Verbs, String> {
    // SAFETY: loading libibverbs runs its constructors, which only set up internal tables.
    let lib = unsafe { Library::new("libibverbs.so.1") }
        .map_err(|e| format!("libibverbs.so.1 not found ({e}); install rdma-core's libibverbs1"))?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol's type is the one declared in verbs.h for this function; the
            // pointer stays valid because the Library is kept in the same struct.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("libibverbs.so.1 lacks {}: {e}", $name))?
        };
    }
    Ok(Verbs {
        get_device_list: sym!("ibv_get_device_list"),
        free_device_list: sym!("ibv_free_device_list"),
        open_device: sym!("ibv_open_device"),
        close_device: sym!("ibv_close_device"),
        query_device: sym!("ibv_query_device"),
        query_port: sym!("ibv_query_port"),
        query_gid: sym!("ibv_query_gid"),
        alloc_pd: sym!("ibv_alloc_pd"),
        dealloc_pd: sym!("ibv_dealloc_pd"),
        reg_mr: sym!("ibv_reg_mr"),
        dereg_mr: sym!("ibv_dereg_mr"),
        create_comp_channel: sym!("ibv_create_comp_channel"),
        destroy_comp_channel: sym!("ibv_destroy_comp_channel"),
        create_cq: sym!("ibv_create_cq"),
        destroy_cq: sym!("ibv_destroy_cq"),
        get_cq_event: sym!("ibv_get_cq_event"),
        ack_cq_events: sym!("ibv_ack_cq_events"),
        create_qp: sym!("ibv_create_qp"),
        modify_qp: sym!("ibv_modify_qp"),
        destroy_qp: sym!("ibv_destroy_qp"),
        create_ah: sym!("ibv_create_ah"),
        destroy_ah: sym!("ibv_destroy_ah"),
        _lib: lib,
    })
}

/// Why the device list is empty or could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListError {
    /// The library could not be loaded.
    NoLibrary(String),
    /// The kernel has no RDMA support (`ENOSYS`).
    NoKernelSupport,
    /// Another OS error.
    Os(String),
}

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListError::NoLibrary(why) => f.write_str(why),
            ListError::NoKernelSupport => {
                f.write_str("no RDMA devices: kernel has no RDMA support (ENOSYS)")
            }
            ListError::Os(why) => write!(f, "cannot list RDMA devices: {why}"),
        }
    }
}

/// An open device context (`ibv_context`), closed on drop.
pub struct Context {
    /// The libibverbs functions, resolved once per process.
    pub verbs: &'static Verbs,
    ctx: NonNull<ibv_context>,
    name: String,
}

// SAFETY: libibverbs contexts are thread-safe for the control verbs we call; the fast-path verbs
// are called by the owner of each queue only.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

/// Names of the RDMA devices present, and for each an opened context when `open` is set.
pub fn device_list() -> Result<Vec<String>, ListError> {
    let v = verbs().map_err(ListError::NoLibrary)?;
    let mut n: c_int = 0;
    // SAFETY: FFI call with a valid out-pointer.
    let list = unsafe { (v.get_device_list)(&mut n) };
    if list.is_null() {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOSYS) => Err(ListError::NoKernelSupport),
            _ => Err(ListError::Os(err.to_string())),
        };
    }
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` valid device pointers until freed below.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `name` is a NUL-terminated array inside the device struct.
        let name = unsafe { CStr::from_ptr((*dev).name.as_ptr()) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: the list came from get_device_list and is freed once.
    unsafe { (v.free_device_list)(list) };
    Ok(names)
}

impl Context {
    /// Opens the device named `name`.
    pub fn open(name: &str) -> Result<Arc<Context>, String> {
        let v = verbs()?;
        let mut n: c_int = 0;
        // SAFETY: FFI call with a valid out-pointer.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(ListError::NoKernelSupport.to_string());
        }
        let mut found = ptr::null_mut();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` valid device pointers until freed below.
            let dev = unsafe { *list.add(i) };
            if dev.is_null() {
                continue;
            }
            // SAFETY: `name` is a NUL-terminated array inside the device struct.
            let dev_name = unsafe { CStr::from_ptr((*dev).name.as_ptr()) };
            if dev_name.to_bytes() == name.as_bytes() {
                // SAFETY: the device pointer is valid while the list lives.
                found = unsafe { (v.open_device)(dev) };
                if found.is_null() {
                    let e = io::Error::last_os_error();
                    // SAFETY: freed once.
                    unsafe { (v.free_device_list)(list) };
                    return Err(format!("cannot open RDMA device {name}: {e}"));
                }
                break;
            }
        }
        // SAFETY: the list came from get_device_list; opened contexts outlive it.
        unsafe { (v.free_device_list)(list) };
        match NonNull::new(found) {
            Some(ctx) => Ok(Arc::new(Context {
                verbs: v,
                ctx,
                name: name.to_owned(),
            })),
            None => Err(format!("no RDMA device named {name}")),
        }
    }
    /// The raw context.
    pub fn raw(&self) -> *mut ibv_context {
        self.ctx.as_ptr()
    }
    /// Device name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<ibv_device_attr, String> {
        // SAFETY: ibv_device_attr is plain data; all-zero is a valid value.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer.
        let rc = unsafe { (self.verbs.query_device)(self.raw(), &mut attr) };
        if rc != 0 {
            return Err(format!(
                "ibv_query_device({}): {}",
                self.name,
                io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(attr)
    }
    /// `ibv_query_port` (the exported, compatible form: fields up to `link_layer`).
    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr, String> {
        let mut attr = ibv_port_attr::default();
        // SAFETY: valid context; the out struct is at least as large as the compat struct.
        let rc = unsafe { (self.verbs.query_port)(self.raw(), port, &mut attr) };
        if rc != 0 {
            return Err(format!(
                "ibv_query_port({}:{port}): {}",
                self.name,
                io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(attr)
    }
    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<ibv_gid, String> {
        let mut gid = ibv_gid::default();
        // SAFETY: valid context and out-pointer.
        let rc = unsafe { (self.verbs.query_gid)(self.raw(), port, index as c_int, &mut gid) };
        if rc != 0 {
            return Err(format!(
                "ibv_query_gid({}:{port}, {index}) failed",
                self.name
            ));
        }
        Ok(gid)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened by open_device, closed once; every child object holds an Arc to us.
        unsafe { (self.verbs.close_device)(self.raw()) };
    }
}

/// A protection domain, deallocated on drop.
pub struct Pd {
    /// The device context this object belongs to (kept open while it lives).
    pub ctx: Arc<Context>,
    pd: NonNull<ibv_pd>,
}

// SAFETY: the PD is only passed to thread-safe control verbs.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// `ibv_alloc_pd`.
    pub fn alloc(ctx: &Arc<Context>) -> Result<Arc<Pd>, String> {
        // SAFETY: valid context.
        let pd = unsafe { (ctx.verbs.alloc_pd)(ctx.raw()) };
        NonNull::new(pd)
            .map(|pd| {
                Arc::new(Pd {
                    ctx: ctx.clone(),
                    pd,
                })
            })
            .ok_or_else(|| format!("ibv_alloc_pd({}): {}", ctx.name, io::Error::last_os_error()))
    }
    /// The raw PD.
    pub fn raw(&self) -> *mut ibv_pd {
        self.pd.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated by alloc_pd, freed once, after every MR and QP (they hold an Arc).
        unsafe { (self.ctx.verbs.dealloc_pd)(self.raw()) };
    }
}

/// A memory registration, deregistered on drop.
pub struct Mr {
    /// The protection domain this object belongs to (kept while it lives).
    pub pd: Arc<Pd>,
    mr: NonNull<ibv_mr>,
}

// SAFETY: an MR is immutable after registration; dereg happens once, in drop.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// `ibv_reg_mr`.
    ///
    /// # Safety
    /// `addr..addr+len` must stay mapped while the registration lives.
    pub unsafe fn register(
        pd: &Arc<Pd>,
        addr: *mut u8,
        len: usize,
        access: c_int,
    ) -> Result<Mr, io::Error> {
        // SAFETY: valid PD; the caller guarantees the range.
        let mr = unsafe { (pd.ctx.verbs.reg_mr)(pd.raw(), addr.cast(), len, access) };
        NonNull::new(mr)
            .map(|mr| Mr { pd: pd.clone(), mr })
            .ok_or_else(io::Error::last_os_error)
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is valid until drop.
        unsafe { self.mr.as_ref().lkey }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the MR is valid until drop.
        unsafe { self.mr.as_ref().rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by reg_mr, deregistered once.
        unsafe { (self.pd.ctx.verbs.dereg_mr)(self.mr.as_ptr()) };
    }
}

/// A completion channel, destroyed on drop (after its CQs, which hold an Arc to it).
pub struct CompChannel {
    /// The device context this object belongs to (kept open while it lives).
    pub ctx: Arc<Context>,
    ch: NonNull<ibv_comp_channel>,
}

// SAFETY: libibverbs completion channels may be used from any thread (the fd is a kernel
// object; get_cq_event/ack_cq_events lock internally).
unsafe impl Send for CompChannel {}
// SAFETY: as above.
unsafe impl Sync for CompChannel {}

impl CompChannel {
    /// `ibv_create_comp_channel`, with its fd made non-blocking.
    pub fn create(ctx: &Arc<Context>) -> Result<Arc<CompChannel>, String> {
        // SAFETY: valid context.
        let ch = unsafe { (ctx.verbs.create_comp_channel)(ctx.raw()) };
        let ch = NonNull::new(ch).ok_or_else(|| {
            format!(
                "ibv_create_comp_channel({}): {}",
                ctx.name,
                io::Error::last_os_error()
            )
        })?;
        let ch = Arc::new(CompChannel {
            ctx: ctx.clone(),
            ch,
        });
        let fd = ch.fd();
        // SAFETY: fcntl on a valid fd owned by the channel.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Ok(ch)
    }
    /// The event fd.
    pub fn fd(&self) -> c_int {
        // SAFETY: the channel is valid until drop.
        unsafe { self.ch.as_ref().fd }
    }
    /// Reads and acknowledges every queued CQ event (non-blocking). Gives how many there were.
    pub fn drain(&self) -> usize {
        let mut n = 0;
        loop {
            let mut cq = ptr::null_mut();
            let mut cq_ctx = ptr::null_mut();
            // SAFETY: valid channel; the fd is non-blocking so this returns -1 when empty.
            let rc =
                unsafe { (self.ctx.verbs.get_cq_event)(self.ch.as_ptr(), &mut cq, &mut cq_ctx) };
            if rc != 0 || cq.is_null() {
                return n;
            }
            // SAFETY: the event came from this CQ, acknowledged once.
            unsafe { (self.ctx.verbs.ack_cq_events)(cq, 1) };
            n += 1;
        }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once after its CQs.
        unsafe { (self.ctx.verbs.destroy_comp_channel)(self.ch.as_ptr()) };
    }
}

/// A completion queue, destroyed on drop.
pub struct Cq {
    /// The device context this object belongs to (kept open while it lives).
    pub ctx: Arc<Context>,
    _channel: Option<Arc<CompChannel>>,
    cq: NonNull<ibv_cq>,
    poll: PollCqFn,
    notify: ReqNotifyFn,
}

impl Cq {
    /// `ibv_create_cq` with `cqe` entries on `channel`.
    pub fn create(
        ctx: &Arc<Context>,
        cqe: u32,
        channel: Option<&Arc<CompChannel>>,
    ) -> Result<Cq, String> {
        let ch = channel.map_or(ptr::null_mut(), |c| c.ch.as_ptr());
        // SAFETY: valid context and channel.
        let cq = unsafe { (ctx.verbs.create_cq)(ctx.raw(), cqe as c_int, ptr::null_mut(), ch, 0) };
        let cq = NonNull::new(cq).ok_or_else(|| {
            format!(
                "ibv_create_cq({}, {cqe}): {}",
                ctx.name,
                io::Error::last_os_error()
            )
        })?;
        // SAFETY: the context's ops table is filled by the provider at open time.
        let ops = unsafe { &(*ctx.raw()).ops };
        let (Some(poll), Some(notify)) = (ops.poll_cq, ops.req_notify_cq) else {
            // SAFETY: just created.
            unsafe { (ctx.verbs.destroy_cq)(cq.as_ptr()) };
            return Err(format!(
                "{}: provider has no poll_cq/req_notify_cq",
                ctx.name
            ));
        };
        Ok(Cq {
            ctx: ctx.clone(),
            _channel: channel.cloned(),
            cq,
            poll,
            notify,
        })
    }
    /// The raw CQ.
    pub fn raw(&self) -> *mut ibv_cq {
        self.cq.as_ptr()
    }
    /// `ibv_poll_cq` (inline in verbs.h: through the ops table).
    #[inline]
    pub fn poll(&self, wcs: &mut [ibv_wc]) -> Result<usize, c_int> {
        // SAFETY: valid CQ; `wcs` has room for `len` entries.
        let n = unsafe { (self.poll)(self.cq.as_ptr(), wcs.len() as c_int, wcs.as_mut_ptr()) };
        usize::try_from(n).map_err(|_| n)
    }
    /// `ibv_poll_cq` into uninitialised entries (nothing to clear before each poll): gives
    /// the completions the provider wrote.
    #[inline]
    pub fn poll_uninit<'a>(
        &self,
        wcs: &'a mut [std::mem::MaybeUninit<ibv_wc>],
    ) -> Result<&'a [ibv_wc], c_int> {
        // SAFETY: valid CQ; `wcs` has room for `len` entries, which the provider only writes.
        let n = unsafe {
            (self.poll)(
                self.cq.as_ptr(),
                wcs.len() as c_int,
                wcs.as_mut_ptr().cast::<ibv_wc>(),
            )
        };
        let n = usize::try_from(n).map_err(|_| n)?.min(wcs.len());
        // SAFETY: the provider wrote the first `n` entries.
        Ok(unsafe { std::slice::from_raw_parts(wcs.as_ptr().cast::<ibv_wc>(), n) })
    }
    /// `ibv_req_notify_cq` (inline in verbs.h: through the ops table).
    pub fn req_notify(&self) -> Result<(), c_int> {
        // SAFETY: valid CQ.
        match unsafe { (self.notify)(self.cq.as_ptr(), 0) } {
            0 => Ok(()),
            e => Err(e),
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once after its QPs (the iface drops them first).
        unsafe { (self.ctx.verbs.destroy_cq)(self.cq.as_ptr()) };
    }
}

/// A queue pair, destroyed on drop.
pub struct Qp {
    /// The protection domain this object belongs to (kept while it lives).
    pub pd: Arc<Pd>,
    qp: NonNull<ibv_qp>,
    post_send: PostSendFn,
    post_recv: PostRecvFn,
    /// Capabilities granted at creation.
    pub cap: ibv_qp_cap,
}

impl Qp {
    /// `ibv_create_qp` (RC) on the given CQs.
    pub fn create_rc(
        pd: &Arc<Pd>,
        send_cq: &Cq,
        recv_cq: &Cq,
        cap: ibv_qp_cap,
    ) -> Result<Qp, io::Error> {
        Self::create(pd, send_cq, recv_cq, cap, IBV_QPT_RC)
    }
    /// `ibv_create_qp` (UD) on the given CQs.
    pub fn create_ud(
        pd: &Arc<Pd>,
        send_cq: &Cq,
        recv_cq: &Cq,
        cap: ibv_qp_cap,
    ) -> Result<Qp, io::Error> {
        Self::create(pd, send_cq, recv_cq, cap, IBV_QPT_UD)
    }
    fn create(
        pd: &Arc<Pd>,
        send_cq: &Cq,
        recv_cq: &Cq,
        cap: ibv_qp_cap,
        qp_type: c_int,
    ) -> Result<Qp, io::Error> {
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.raw(),
            recv_cq: recv_cq.raw(),
            srq: ptr::null_mut(),
            cap,
            qp_type,
            sq_sig_all: 0,
        };
        // SAFETY: valid PD, CQs and init attributes.
        let qp = unsafe { (pd.ctx.verbs.create_qp)(pd.raw(), &mut init) };
        let qp = NonNull::new(qp).ok_or_else(io::Error::last_os_error)?;
        // SAFETY: the context's ops table is filled by the provider at open time.
        let ops = unsafe { &(*pd.ctx.raw()).ops };
        let (Some(post_send), Some(post_recv)) = (ops.post_send, ops.post_recv) else {
            // SAFETY: just created.
            unsafe { (pd.ctx.verbs.destroy_qp)(qp.as_ptr()) };
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "provider has no post_send/post_recv",
            ));
        };
        Ok(Qp {
            pd: pd.clone(),
            qp,
            post_send,
            post_recv,
            cap: init.cap,
        })
    }
    /// QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: valid QP.
        unsafe { self.qp.as_ref().qp_num }
    }
    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &mut ibv_qp_attr, mask: c_int) -> Result<(), io::Error> {
        // SAFETY: valid QP and attributes.
        match unsafe { (self.pd.ctx.verbs.modify_qp)(self.qp.as_ptr(), attr, mask) } {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
    /// `ibv_post_send` (inline in verbs.h: through the ops table).
    ///
    /// # Safety
    /// Every sge must describe memory registered in this QP's PD that stays valid until the
    /// work request completes (or was copied: `IBV_SEND_INLINE`).
    #[inline]
    pub unsafe fn post_send(&self, wr: &mut ibv_send_wr) -> Result<(), c_int> {
        let mut bad = ptr::null_mut();
        // SAFETY: valid QP; the caller guarantees the memory the WR describes.
        match unsafe { (self.post_send)(self.qp.as_ptr(), wr, &mut bad) } {
            0 => Ok(()),
            e => Err(e),
        }
    }
    /// `ibv_post_recv` (inline in verbs.h: through the ops table).
    ///
    /// # Safety
    /// As for [`Qp::post_send`]; the memory must stay valid until the receive completes or the
    /// QP is destroyed.
    #[inline]
    pub unsafe fn post_recv(&self, wr: &mut ibv_recv_wr) -> Result<(), c_int> {
        let mut bad = ptr::null_mut();
        // SAFETY: valid QP; the caller guarantees the memory the WR describes.
        match unsafe { (self.post_recv)(self.qp.as_ptr(), wr, &mut bad) } {
            0 => Ok(()),
            e => Err(e),
        }
    }
    /// Posts receive buffers `slots` of a region cut into `seg`-byte segments (slot `s` at
    /// `base + s * seg`, local key `lkey`), in chains of up to `N` work requests per
    /// `ibv_post_recv`; the work request of slot `s` has id `wr_id(s)`.
    ///
    /// # Safety
    /// As for [`Qp::post_recv`], for every segment named in `slots`.
    #[inline]
    pub unsafe fn post_recv_slots<const N: usize>(
        &self,
        base: u64,
        seg: usize,
        lkey: u32,
        slots: &[u32],
        wr_id: impl Fn(u32) -> u64,
    ) -> Result<(), c_int> {
        for chunk in slots.chunks(N) {
            let mut sges = [ibv_sge::default(); N];
            let mut wrs = [ibv_recv_wr::default(); N];
            let n = chunk.len();
            for (i, &slot) in chunk.iter().enumerate() {
                sges[i] = ibv_sge {
                    addr: base + (slot as usize * seg) as u64,
                    length: seg as u32,
                    lkey,
                };
                wrs[i].wr_id = wr_id(slot);
                wrs[i].num_sge = 1;
            }
            // Link the chain once the arrays stay put.
            for i in 0..n {
                wrs[i].sg_list = &mut sges[i];
                if i + 1 < n {
                    wrs[i].next = &mut wrs[i + 1];
                }
            }
            // SAFETY: the caller guarantees the segments; the chain and its scatter entries
            // are valid stack memory for the call.
            unsafe { self.post_recv(&mut wrs[0]) }?;
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        unsafe { (self.pd.ctx.verbs.destroy_qp)(self.qp.as_ptr()) };
    }
}

/// An address handle (`ibv_ah`): the route to a remote port for UD sends, destroyed on drop.
pub struct Ah {
    pd: Arc<Pd>,
    ah: NonNull<ibv_ah>,
}

impl Ah {
    /// `ibv_create_ah`.
    pub fn create(pd: &Arc<Pd>, attr: &mut ibv_ah_attr) -> Result<Ah, io::Error> {
        // SAFETY: valid PD and attributes.
        let ah = unsafe { (pd.ctx.verbs.create_ah)(pd.raw(), attr) };
        let ah = NonNull::new(ah).ok_or_else(io::Error::last_os_error)?;
        Ok(Ah { pd: pd.clone(), ah })
    }
    /// The handle, for `ibv_send_wr::set_ud`.
    pub fn raw(&self) -> *mut ibv_ah {
        self.ah.as_ptr()
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once, after the sends that named it were posted
        // (the provider copies the address vector into the work request).
        unsafe { (self.pd.ctx.verbs.destroy_ah)(self.ah.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_list_never_panics() {
        // On a host without RDMA this is an error with a reason; in the VM it lists rxe0.
        match device_list() {
            Ok(names) => println!("RDMA devices: {names:?}"),
            Err(e) => {
                let text = e.to_string();
                assert!(!text.is_empty());
                println!("no RDMA: {text}");
            }
        }
    }
}
