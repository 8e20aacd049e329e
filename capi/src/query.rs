//! Queries and printing: `ucp_ep_query`, `ucp_worker_address_query`, `ucp_request_query`,
//! `ucp_lib_query`, `ucp_ep_print_info`, `ucp_worker_print_info`, `ucp_mem_print_info`
//! (`ucp_config_print` is in [`crate::config`], `ucp_context_print_info` in
//! [`crate::context`]).

use crate::conn::sockaddr_to_c;
use crate::ctext::{write_name, write_to};
use crate::ffi::*;
use crate::guard::{check_mask, ffi, refuse};
use crate::handles::{hdr_of, worker_ref, Context, Ep, ReqHdr, Worker, F_COMPLETED};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::Ordering;

/// `ucs_status_t ucp_lib_query(ucp_lib_attr_t *attr)`: every thread mode is supported.
///
/// # Safety
/// A writable `attr`.
#[no_mangle]
pub unsafe extern "C" fn ucp_lib_query(attr: *mut LibAttr) -> Status {
    const NAME: &str = "ucp_lib_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "attr is NULL");
        }
        // SAFETY: the caller's struct.
        let a = unsafe { &mut *attr };
        if let Err(s) = check_mask(
            NAME,
            "ucp_lib_attr_t.field_mask",
            a.field_mask,
            UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL,
        ) {
            return s;
        }
        if a.field_mask & UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL != 0 {
            a.max_thread_level = UCS_THREAD_MODE_MULTI;
        }
        UCS_OK
    })
}

/// `ucs_status_t ucp_worker_address_query(ucp_address_t *address, ucp_worker_address_attr_t
/// *attr)`: the unique id of the worker the address belongs to.
///
/// # Safety
/// An address from `ucp_worker_get_address` / `ucp_worker_query`; a writable `attr`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_address_query(
    address: *mut c_void,
    attr: *mut WorkerAddressAttr,
) -> Status {
    const NAME: &str = "ucp_worker_address_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if address.is_null() || attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: the caller's struct.
        let a = unsafe { &mut *attr };
        if let Err(s) = check_mask(
            NAME,
            "ucp_worker_address_attr_t.field_mask",
            a.field_mask,
            UCP_WORKER_ADDRESS_ATTR_FIELD_UID,
        ) {
            return s;
        }
        // SAFETY: the address starts with its 4-byte length (see worker::client_address).
        let bytes = unsafe {
            let len = (address as *const u32).read_unaligned().to_le() as usize;
            if len == 0 || len > 1 << 16 {
                return refuse(
                    NAME,
                    UCS_ERR_INVALID_ADDR,
                    format!("not a rucx worker address (length {len})"),
                );
            }
            std::slice::from_raw_parts((address as *const u8).add(4), len)
        };
        match ucp::WorkerAddress::check(bytes) {
            Ok(uid) => {
                if a.field_mask & UCP_WORKER_ADDRESS_ATTR_FIELD_UID != 0 {
                    a.worker_uid = uid;
                }
                UCS_OK
            }
            Err(e) => refuse(NAME, UCS_ERR_INVALID_ADDR, e),
        }
    })
}

/// `ucs_status_t ucp_request_query(void *request, ucp_request_attr_t *attr)`: status,
/// memory type (host), and a description (`debug_string` of `debug_string_size` bytes, both
/// the caller's).
///
/// # Safety
/// A request from this library; a writable `attr`.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_query(request: *mut c_void, attr: *mut RequestAttr) -> Status {
    const NAME: &str = "ucp_request_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if request.is_null() || ptr_is_err(request) || attr.is_null() {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "not a request, or attr is NULL",
            );
        }
        // SAFETY: the caller's struct.
        let a = unsafe { &mut *attr };
        let known = UCP_REQUEST_ATTR_FIELD_INFO_STRING
            | UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE
            | UCP_REQUEST_ATTR_FIELD_STATUS
            | UCP_REQUEST_ATTR_FIELD_MEM_TYPE;
        if let Err(s) = check_mask(NAME, "ucp_request_attr_t.field_mask", a.field_mask, known) {
            return s;
        }
        let h: *mut ReqHdr = hdr_of(request);
        // SAFETY: a live request.
        let hdr = unsafe { &*h };
        let done = hdr.flags.load(Ordering::Acquire) & F_COMPLETED != 0;
        let status = if done { hdr.status } else { UCS_INPROGRESS };
        let has = |b: u64| a.field_mask & b != 0;
        if has(UCP_REQUEST_ATTR_FIELD_STATUS) {
            a.status = status;
        }
        if has(UCP_REQUEST_ATTR_FIELD_MEM_TYPE) {
            a.mem_type = UCS_MEMORY_TYPE_HOST;
        }
        if has(UCP_REQUEST_ATTR_FIELD_INFO_STRING) {
            if !has(UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE) || a.debug_string.is_null() {
                return refuse(
                    NAME,
                    UCS_ERR_INVALID_PARAM,
                    "INFO_STRING needs a buffer and INFO_STRING_SIZE",
                );
            }
            let text = format!(
                "rucx request {request:p}: {}, status {}{}",
                if done { "completed" } else { "in progress" },
                // SAFETY: a static C string.
                unsafe { CStr::from_ptr(crate::ucs_codes::ucs_status_string(status)) }
                    .to_string_lossy(),
                if hdr.info.length > 0 {
                    format!(
                        ", {} bytes, tag {:#x}",
                        hdr.info.length, hdr.info.sender_tag
                    )
                } else {
                    String::new()
                }
            );
            write_cstr(a.debug_string, a.debug_string_size, &text);
        }
        UCS_OK
    })
}

/// Copies text into a C buffer of `size` bytes, cut and NUL-terminated.
fn write_cstr(dst: *mut c_char, size: usize, text: &str) {
    if dst.is_null() || size == 0 {
        return;
    }
    let n = text.len().min(size - 1);
    // SAFETY: the caller's buffer of `size` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), dst as *mut u8, n);
        *dst.add(n) = 0;
    }
}

const EP_ATTR_KNOWN: u64 = UCP_EP_ATTR_FIELD_NAME
    | UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR
    | UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR
    | UCP_EP_ATTR_FIELD_TRANSPORTS
    | UCP_EP_ATTR_FIELD_USER_DATA;

/// `ucs_status_t ucp_ep_query(ucp_ep_h ep, ucp_ep_attr_t *attr)`: name, socket addresses
/// (client/server endpoints only: others give `UCS_ERR_NOT_CONNECTED` when asked), the
/// transports of its lanes (the caller's `entries` array; names stay valid while the
/// endpoint lives) and `user_data`.
///
/// # Safety
/// A live endpoint; a writable `attr` as long as its mask says.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_query(ep: *mut Ep, attr: *mut EpAttr) -> Status {
    const NAME: &str = "ucp_ep_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if ep.is_null() || attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: the caller's struct, read field by field as its mask allows (a UCX 1.13
        // client's struct ends before `transports`).
        let mask = unsafe { (*attr).field_mask };
        if let Err(s) = check_mask(NAME, "ucp_ep_attr_t.field_mask", mask, EP_ATTR_KNOWN) {
            return s;
        }
        // SAFETY: a live endpoint; its worker outlives it.
        let (w, e) = unsafe { (&*(*ep).worker, &mut *ep) };
        let _g = w.lock.lock();
        let has = |b: u64| mask & b != 0;
        if has(UCP_EP_ATTR_FIELD_NAME) {
            let name = e
                .ext
                .as_ref()
                .and_then(|x| x.name.clone())
                .unwrap_or_else(|| format!("{}:ep{:x}", w.name, ep as usize));
            // SAFETY: the name field is present.
            write_name(unsafe { &mut (*attr).name }, &name);
        }
        if has(UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR) || has(UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR) {
            let Some((local, remote)) = e.ext.as_ref().and_then(|x| x.sockaddrs) else {
                return refuse(
                    NAME,
                    UCS_ERR_NOT_CONNECTED,
                    "socket addresses: the endpoint was not made by a client/server connection",
                );
            };
            // SAFETY: the fields are present per the mask.
            unsafe {
                if has(UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR) {
                    sockaddr_to_c(&local, &mut (*attr).local_sockaddr);
                }
                if has(UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR) {
                    sockaddr_to_c(&remote, &mut (*attr).remote_sockaddr);
                }
            }
        }
        if has(UCP_EP_ATTR_FIELD_TRANSPORTS) {
            if e.connecting {
                return refuse(
                    NAME,
                    UCS_ERR_NOT_CONNECTED,
                    "transports: the endpoint is connecting",
                );
            }
            let list = match w.inner.borrow().w.ep_transports(e.h) {
                Ok(l) => l,
                Err(err) => return crate::guard::fail(NAME, &err),
            };
            // SAFETY: the transports field is present per the mask.
            let t = unsafe { &mut (*attr).transports };
            if t.entries.is_null() && t.num_entries > 0 {
                return refuse(NAME, UCS_ERR_INVALID_PARAM, "transports.entries is NULL");
            }
            let stride = t.entry_size.max(std::mem::size_of::<TransportEntry>());
            let x = e.ext.get_or_insert_with(Box::default);
            x.tl_names = list.iter().map(|(a, b)| (cstring(a), cstring(b))).collect();
            let n = x.tl_names.len().min(t.num_entries as usize);
            for (k, (tl, dev)) in x.tl_names.iter().take(n).enumerate() {
                // SAFETY: entry `k` of the caller's array (`entry_size` apart).
                unsafe {
                    let entry = (t.entries as *mut u8).add(k * stride) as *mut TransportEntry;
                    (*entry).transport_name = tl.as_ptr();
                    (*entry).device_name = dev.as_ptr();
                }
            }
            t.num_entries = n as u32;
        }
        if has(UCP_EP_ATTR_FIELD_USER_DATA) {
            // SAFETY: the field is present per the mask.
            unsafe { (*attr).user_data = e.user_data };
        }
        UCS_OK
    })
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).unwrap_or_default()
}

/// `void ucp_ep_print_info(ucp_ep_h ep, FILE *stream)`: the endpoint's lanes and protocol
/// table.
///
/// # Safety
/// A live endpoint and an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_print_info(ep: *mut Ep, stream: *mut libc::FILE) {
    const NAME: &str = "ucp_ep_print_info";
    ffi(NAME, (), || {
        if ep.is_null() || stream.is_null() {
            refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
            return;
        }
        // SAFETY: a live endpoint; its worker outlives it.
        let (w, e) = unsafe { (&*(*ep).worker, &*ep) };
        let _g = w.lock.lock();
        let mut text = format!("#\n# UCP endpoint {ep:p} (rucx)\n#\n");
        if e.connecting {
            text += "#   connecting (client/server)\n";
        } else {
            let i = w.inner.borrow();
            if let Ok(list) = i.w.ep_transports(e.h) {
                for (k, (tl, dev)) in list.iter().enumerate() {
                    text += &format!("#   lane[{k}]: {tl}/{dev}\n");
                }
            }
            match i.w.ep_proto_info(e.h) {
                Ok(t) => {
                    for line in t.lines() {
                        text += &format!("#   {line}\n");
                    }
                }
                Err(err) => text += &format!("#   {err}\n"),
            }
        }
        text += "#\n";
        // SAFETY: the caller's open stream (checked non-null).
        unsafe { write_to(stream, &text) };
    })
}

/// `void ucp_worker_print_info(ucp_worker_h worker, FILE *stream)`: name, address length,
/// thread mode, interfaces.
///
/// # Safety
/// A live worker and an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_print_info(worker: *mut Worker, stream: *mut libc::FILE) {
    const NAME: &str = "ucp_worker_print_info";
    ffi(NAME, (), || {
        let Ok(w) = worker_ref(NAME, worker) else {
            return;
        };
        let _g = w.lock.lock();
        let i = w.inner.borrow();
        let mut text = format!(
            "#\n# UCP worker '{}' (rucx)\n#\n#                 address: {} bytes\n#             thread mode: {}\n",
            w.name,
            i.w.address().len() + 4,
            ["single", "serialized", "multi"][w.thread_mode.min(2) as usize]
        );
        for (k, iface) in i.w.interfaces().iter().enumerate() {
            text += &format!("#              interface{k}: {iface}\n");
        }
        text += "#\n";
        // SAFETY: the caller's open stream (checked non-null).
        unsafe { write_to(stream, &text) };
    })
}

/// `void ucp_mem_print_info(const char *mem_spec, ucp_context_h context, FILE *stream)`:
/// maps memory as `mem_spec` says (`<size>[,<memory type>]`, UCX's size syntax), prints the
/// mapping and its remote key, and unmaps it.
///
/// # Safety
/// A C string, a live context with a worker, and an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_print_info(
    mem_spec: *const c_char,
    context: *mut Context,
    stream: *mut libc::FILE,
) {
    const NAME: &str = "ucp_mem_print_info";
    ffi(NAME, (), || {
        if mem_spec.is_null() || context.is_null() || stream.is_null() {
            refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
            return;
        }
        // SAFETY: the caller's C string.
        let spec = unsafe { CStr::from_ptr(mem_spec) }
            .to_string_lossy()
            .into_owned();
        let mut parts = spec.split(',');
        let size = match parts.next().map(ucs::config::parse_size) {
            Some(Ok(ucs::config::Size::Bytes(b))) => b as usize,
            _ => {
                refuse(
                    NAME,
                    UCS_ERR_INVALID_PARAM,
                    format!("'{spec}' is not <size>[,<memory type>]"),
                );
                return;
            }
        };
        if let Some(t) = parts.next() {
            if t.trim() != "host" {
                refuse(
                    NAME,
                    UCS_ERR_UNSUPPORTED,
                    format!("memory type '{t}' (rucx maps host memory)"),
                );
                return;
            }
        }
        // SAFETY: an all-zero parameter struct is valid (no fields), filled below.
        let mut params: MemMapParams = unsafe { std::mem::zeroed() };
        params.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        params.length = size;
        params.flags = UCP_MEM_MAP_ALLOCATE;
        let mut memh = std::ptr::null_mut();
        // SAFETY: forwarded, with our params.
        let s = unsafe { crate::mem::ucp_mem_map(context, &params, &mut memh) };
        if s != UCS_OK {
            return;
        }
        let mut rkey: *mut c_void = std::ptr::null_mut();
        let mut rkey_len = 0usize;
        // SAFETY: the mapping just made.
        let s = unsafe { crate::rma::ucp_rkey_pack(context, memh, &mut rkey, &mut rkey_len) };
        // SAFETY: as above.
        let m = unsafe { &*memh };
        let mut text = format!(
            "#\n# UCP memory allocation (rucx)\n#\n#  allocated {size} bytes at {:p}\n#  memory type: host\n",
            m.address
        );
        if let Some(map) = &m.map {
            text += &format!("#  transports: {}\n", map.transports().join(", "));
        }
        if s == UCS_OK {
            text += &format!("#  packed remote key: {rkey_len} bytes\n");
            // SAFETY: the key just packed.
            unsafe { crate::rma::ucp_rkey_buffer_release(rkey) };
        }
        text += "#\n";
        // SAFETY: the caller's open stream (checked non-null).
        unsafe { write_to(stream, &text) };
        // SAFETY: the mapping just made.
        unsafe { crate::mem::ucp_mem_unmap(context, memh) };
    })
}
