//! Thin libibverbs bindings, loaded at run time from `libibverbs.so.1` (the only place in rucx
//! with verbs `extern` calls).
//!
//! Loading at run time (instead of linking) lets every rucx binary start on machines without RDMA
//! libraries. The `#[repr(C)]` types mirror rdma-core's `<infiniband/verbs.h>` for the fields we
//! use, with their sizes and offsets checked by the layout tests below against the header's
//! values. The `static inline` verbs of the header (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`) go through the context's ops table, exactly as the header
//! does. With libibverbs present but no kernel RDMA support, `ibv_get_device_list` returns NULL
//! with `errno == ENOSYS`: [`device_list`] reports that as its own error so callers can say why.

#![allow(non_camel_case_types, missing_docs, dead_code)]

use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::{Arc, OnceLock};

/// `union ibv_gid` (8-byte aligned through its `global` member of two `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_device` (leading part is the library's private ops).
#[repr(C)]
pub struct ibv_device {
    _ops: [*mut c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: the provider's fast-path functions.
#[repr(C)]
pub struct ibv_context_ops {
    _compat0: [*mut c_void; 11],
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    _compat1: [*mut c_void; 7],
    pub post_srq_recv: *mut c_void,
    _compat2: [*mut c_void; 4],
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    _compat3: [*mut c_void; 5],
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    _mutex: [u8; 40],
    pub abi_compat: *mut c_void,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    _mutex: [u8; 40],
    _cond: [u8; 48],
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    _mutex: [u8; 40],
    _cond: [u8; 48],
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`, in its atomic shape (the largest); RDMA operations
/// use `remote_addr` and put the rkey in `compare_add`'s place ([`ibv_send_wr::set_rdma`]).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_send_wr_wr {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: u32,
    /// The `bind_mw` / `tso` union (unused).
    pub bind_mw_tso: [u64; 6],
}

impl Default for ibv_send_wr {
    fn default() -> Self {
        ibv_send_wr {
            wr_id: 0,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
            opcode: 0,
            send_flags: 0,
            imm_data: 0,
            wr: ibv_send_wr_wr::default(),
            qp_type: 0,
            bind_mw_tso: [0; 6],
        }
    }
}

impl ibv_send_wr {
    /// Sets the `wr.rdma` member: `{ uint64_t remote_addr; uint32_t rkey; }`.
    pub fn set_rdma(&mut self, remote_addr: u64, rkey: u32) {
        self.wr.remote_addr = remote_addr;
        // `wr.rdma.rkey` overlays the low half of `wr.atomic.compare_add` (offset 8 of the union).
        self.wr.compare_add = rkey as u64;
    }
    /// Sets the `wr.atomic` member.
    pub fn set_atomic(&mut self, remote_addr: u64, compare_add: u64, swap: u64, rkey: u32) {
        self.wr = ibv_send_wr_wr {
            remote_addr,
            compare_add,
            swap,
            rkey,
        };
    }
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

// Constants of verbs.h.
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPS_RESET: c_int = 0;
pub const IBV_QPS_INIT: c_int = 1;
pub const IBV_QPS_RTR: c_int = 2;
pub const IBV_QPS_RTS: c_int = 3;
pub const IBV_QPS_ERR: c_int = 6;
pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: c_int = 1 << 3;
pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_WR_RDMA_READ: c_int = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_int = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
pub const IBV_SEND_FENCE: c_uint = 1 << 0;
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
pub const IBV_SEND_INLINE: c_uint = 1 << 3;
pub const IBV_WC_SUCCESS: c_int = 0;
pub const IBV_WC_LOC_PROT_ERR: c_int = 4;
pub const IBV_WC_WR_FLUSH_ERR: c_int = 5;
pub const IBV_WC_REM_ACCESS_ERR: c_int = 10;
pub const IBV_WC_RETRY_EXC_ERR: c_int = 12;
pub const IBV_WC_RNR_RETRY_EXC_ERR: c_int = 13;
pub const IBV_WC_REM_ABORT_ERR: c_int = 16;
pub const IBV_WC_RECV: c_int = 1 << 7;
pub const IBV_PORT_ACTIVE: c_int = 4;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_ATOMIC_NONE: c_int = 0;

/// Text of a work-completion status (`ibv_wc_status_str`).
pub fn wc_status_str(status: c_int) -> &'static str {
    const NAMES: [&str; 24] = [
        "success",
        "local length error",
        "local QP operation error",
        "local EE context operation error",
        "local protection error",
        "Work Request Flushed Error",
        "memory management operation error",
        "bad response error",
        "local access error",
        "remote invalid request error",
        "remote access error",
        "remote operation error",
        "transport retry counter exceeded",
        "RNR retry counter exceeded",
        "local RDD violation error",
        "remote invalid RD request",
        "aborted error",
        "invalid EE context number",
        "invalid EE context state",
        "fatal error",
        "response timeout error",
        "general error",
        "TM error",
        "TM software rendezvous",
    ];
    usize::try_from(status)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("unknown")
}

/// MTU enum (`enum ibv_mtu`, 1..=5) to bytes.
pub fn mtu_bytes(mtu: c_int) -> usize {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 0,
    }
}

/// The libibverbs functions rucx calls, resolved once from `libibverbs.so.1`.
pub struct Verbs {
    _lib: Library,
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    pub free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    pub open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    pub query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    pub query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    pub destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    pub ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, c_uint),
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
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
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.raw(),
            recv_cq: recv_cq.raw(),
            srq: ptr::null_mut(),
            cap,
            qp_type: IBV_QPT_RC,
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
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        unsafe { (self.pd.ctx.verbs.destroy_qp)(self.qp.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Expected values computed from rdma-core 44's <infiniband/verbs.h> (x86_64) with a C
    // program using sizeof/offsetof.
    #[test]
    fn layouts_match_verbs_h() {
        assert_eq!(size_of::<ibv_device>(), 664);
        assert_eq!(offset_of!(ibv_device, name), 24);
        assert_eq!(size_of::<ibv_device_attr>(), 232);
        assert_eq!(offset_of!(ibv_device_attr, max_qp_wr), 112);
        assert_eq!(offset_of!(ibv_device_attr, max_sge), 120);
        assert_eq!(offset_of!(ibv_device_attr, max_cqe), 132);
        assert_eq!(offset_of!(ibv_device_attr, max_qp_rd_atom), 144);
        assert_eq!(offset_of!(ibv_device_attr, max_qp_init_rd_atom), 156);
        assert_eq!(offset_of!(ibv_device_attr, atomic_cap), 164);
        assert_eq!(offset_of!(ibv_device_attr, phys_port_cnt), 227);
        assert_eq!(size_of::<ibv_port_attr>(), 52);
        assert_eq!(offset_of!(ibv_port_attr, lid), 34);
        assert_eq!(offset_of!(ibv_port_attr, active_speed), 44);
        assert_eq!(offset_of!(ibv_port_attr, link_layer), 46);
        assert_eq!(offset_of!(ibv_port_attr, port_cap_flags2), 48);
        assert_eq!(size_of::<ibv_context_ops>(), 256);
        assert_eq!(offset_of!(ibv_context_ops, poll_cq), 88);
        assert_eq!(offset_of!(ibv_context_ops, req_notify_cq), 96);
        assert_eq!(offset_of!(ibv_context_ops, post_send), 200);
        assert_eq!(offset_of!(ibv_context_ops, post_recv), 208);
        assert_eq!(size_of::<ibv_context>(), 328);
        assert_eq!(offset_of!(ibv_context, ops), 8);
        assert_eq!(offset_of!(ibv_context, cmd_fd), 264);
        assert_eq!(offset_of!(ibv_context, num_comp_vectors), 272);
        assert_eq!(size_of::<ibv_pd>(), 16);
        assert_eq!(size_of::<ibv_mr>(), 48);
        assert_eq!(offset_of!(ibv_mr, lkey), 36);
        assert_eq!(offset_of!(ibv_mr, rkey), 40);
        assert_eq!(size_of::<ibv_comp_channel>(), 16);
        assert_eq!(offset_of!(ibv_comp_channel, fd), 8);
        assert_eq!(size_of::<ibv_cq>(), 128);
        assert_eq!(offset_of!(ibv_cq, channel), 8);
        assert_eq!(offset_of!(ibv_cq, cqe), 28);
        assert_eq!(size_of::<ibv_qp>(), 160);
        assert_eq!(offset_of!(ibv_qp, qp_num), 52);
        assert_eq!(offset_of!(ibv_qp, state), 56);
        assert_eq!(size_of::<ibv_qp_cap>(), 20);
        assert_eq!(size_of::<ibv_qp_init_attr>(), 64);
        assert_eq!(offset_of!(ibv_qp_init_attr, cap), 32);
        assert_eq!(offset_of!(ibv_qp_init_attr, qp_type), 52);
        assert_eq!(offset_of!(ibv_qp_init_attr, sq_sig_all), 56);
        assert_eq!(size_of::<ibv_global_route>(), 24);
        assert_eq!(offset_of!(ibv_global_route, flow_label), 16);
        assert_eq!(offset_of!(ibv_global_route, sgid_index), 20);
        assert_eq!(size_of::<ibv_ah_attr>(), 32);
        assert_eq!(offset_of!(ibv_ah_attr, dlid), 24);
        assert_eq!(offset_of!(ibv_ah_attr, is_global), 29);
        assert_eq!(offset_of!(ibv_ah_attr, port_num), 30);
        assert_eq!(size_of::<ibv_qp_attr>(), 144);
        assert_eq!(offset_of!(ibv_qp_attr, qp_access_flags), 32);
        assert_eq!(offset_of!(ibv_qp_attr, cap), 36);
        assert_eq!(offset_of!(ibv_qp_attr, ah_attr), 56);
        assert_eq!(offset_of!(ibv_qp_attr, alt_ah_attr), 88);
        assert_eq!(offset_of!(ibv_qp_attr, pkey_index), 120);
        assert_eq!(offset_of!(ibv_qp_attr, max_rd_atomic), 126);
        assert_eq!(offset_of!(ibv_qp_attr, max_dest_rd_atomic), 127);
        assert_eq!(offset_of!(ibv_qp_attr, min_rnr_timer), 128);
        assert_eq!(offset_of!(ibv_qp_attr, port_num), 129);
        assert_eq!(offset_of!(ibv_qp_attr, timeout), 130);
        assert_eq!(offset_of!(ibv_qp_attr, retry_cnt), 131);
        assert_eq!(offset_of!(ibv_qp_attr, rnr_retry), 132);
        assert_eq!(offset_of!(ibv_qp_attr, rate_limit), 136);
        assert_eq!(size_of::<ibv_sge>(), 16);
        assert_eq!(size_of::<ibv_send_wr>(), 128);
        assert_eq!(offset_of!(ibv_send_wr, opcode), 28);
        assert_eq!(offset_of!(ibv_send_wr, send_flags), 32);
        assert_eq!(offset_of!(ibv_send_wr, imm_data), 36);
        assert_eq!(offset_of!(ibv_send_wr, wr), 40);
        // wr.rdma.rkey at 48 = wr + 8 (compare_add's place); wr.atomic.rkey at 64.
        assert_eq!(
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_wr, compare_add),
            48
        );
        assert_eq!(
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_wr, rkey),
            64
        );
        assert_eq!(offset_of!(ibv_send_wr, qp_type), 72);
        assert_eq!(offset_of!(ibv_send_wr, bind_mw_tso), 80);
        assert_eq!(size_of::<ibv_recv_wr>(), 32);
        assert_eq!(size_of::<ibv_wc>(), 48);
        assert_eq!(offset_of!(ibv_wc, status), 8);
        assert_eq!(offset_of!(ibv_wc, opcode), 12);
        assert_eq!(offset_of!(ibv_wc, byte_len), 20);
        assert_eq!(offset_of!(ibv_wc, qp_num), 28);
        assert_eq!(offset_of!(ibv_wc, wc_flags), 36);
        assert_eq!(offset_of!(ibv_wc, slid), 42);
        assert_eq!(offset_of!(ibv_wc, sl), 44);
        assert_eq!(size_of::<ibv_gid>(), 16);
    }

    #[test]
    fn rdma_rkey_lands_where_the_header_puts_it() {
        let mut wr = ibv_send_wr::default();
        wr.set_rdma(0x1122_3344_5566_7788, 0xdead_beef);
        // SAFETY: reading the plain-data struct as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&wr as *const ibv_send_wr).cast::<u8>(),
                size_of::<ibv_send_wr>(),
            )
        };
        assert_eq!(&bytes[40..48], &0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(&bytes[48..52], &0xdead_beefu32.to_ne_bytes());
    }

    #[test]
    fn status_and_mtu_names() {
        assert_eq!(
            wc_status_str(IBV_WC_RETRY_EXC_ERR),
            "transport retry counter exceeded"
        );
        assert_eq!(wc_status_str(-1), "unknown");
        assert_eq!(mtu_bytes(3), 1024);
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(mtu_bytes(0), 0);
    }

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
