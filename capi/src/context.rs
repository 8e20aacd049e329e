//! `ucp_context_h`: `ucp_init_version`, `ucp_cleanup`, `ucp_context_query`,
//! `ucp_context_print_info`, `ucp_get_version`.

use crate::config::Config;
use crate::ctext::write_name;
use crate::ffi::*;
use crate::guard::{check_mask, fail, ffi, refuse};
use crate::handles::{Context, HDR_SIZE};
use std::ffi::{c_char, c_uint, c_void, CStr};
use std::sync::Mutex;
use ucp::{Context as UcpContext, ContextParams, Features};

/// The API version rucx implements (`ucp_get_version` reports it, release 0): every function,
/// field and flag of UCX's `ucp.h` of that release (see `capi/README.md` for what is refused).
pub const API_MAJOR: c_uint = 1;
/// See [`API_MAJOR`].
pub const API_MINOR: c_uint = 22;

const PARAM_KNOWN: u64 = UCP_PARAM_FIELD_FEATURES
    | UCP_PARAM_FIELD_REQUEST_SIZE
    | UCP_PARAM_FIELD_REQUEST_INIT
    | UCP_PARAM_FIELD_REQUEST_CLEANUP
    | UCP_PARAM_FIELD_TAG_SENDER_MASK
    | UCP_PARAM_FIELD_MT_WORKERS_SHARED
    | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS
    | UCP_PARAM_FIELD_ESTIMATED_NUM_PPN
    | UCP_PARAM_FIELD_NAME
    | UCP_PARAM_FIELD_NODE_LOCAL_ID;

const FEATURES_KNOWN: u64 = UCP_FEATURE_TAG
    | UCP_FEATURE_RMA
    | UCP_FEATURE_AMO32
    | UCP_FEATURE_AMO64
    | UCP_FEATURE_WAKEUP
    | UCP_FEATURE_STREAM
    | UCP_FEATURE_AM
    | UCP_FEATURE_EXPORTED_MEMH;

/// Builds a context from C parameters (checked) and a configuration.
///
/// # Safety
/// `params` points to a `ucp_params_t`.
unsafe fn create(
    name: &str,
    api_major: c_uint,
    api_minor: c_uint,
    params: *const UcpParams,
    config: *const Config,
) -> Result<Context, Status> {
    if api_major != API_MAJOR {
        return Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            format!("API version {api_major}.x asked; rucx implements {API_MAJOR}.{API_MINOR}"),
        ));
    }
    if api_minor > API_MINOR {
        // As UCX: a client built against a newer header is accepted (and told at info level).
        tracing::info!(
            "{name}: the client was built for UCX API {api_major}.{api_minor}; rucx implements \
             {API_MAJOR}.{API_MINOR}"
        );
    }
    crate::memtype::set_client_minor(api_minor);
    if params.is_null() {
        return Err(refuse(name, UCS_ERR_INVALID_PARAM, "params is NULL"));
    }
    // SAFETY: the caller passes a valid ucp_params_t.
    let p = unsafe { &*params };
    check_mask(name, "ucp_params_t.field_mask", p.field_mask, PARAM_KNOWN)?;
    let has = |b: u64| p.field_mask & b != 0;
    let features = if has(UCP_PARAM_FIELD_FEATURES) {
        p.features
    } else {
        0
    };
    // As UCX: an empty set is only warned about, and bits of features this library does not
    // know are ignored (a client built against a newer header may pass them).
    if features == 0 {
        tracing::warn!("{name}: empty features set passed to ucp context create");
    }
    if features & UCP_FEATURE_DEVICE != 0 {
        return Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            "UCP_FEATURE_DEVICE (the GPU-device API) is not supported: rucx moves host memory",
        ));
    }
    if features & !FEATURES_KNOWN != 0 {
        tracing::debug!(
            "{name}: ignoring unknown feature bits {:#x}",
            features & !FEATURES_KNOWN
        );
    }
    let asked = features;
    let features = Features::from_bits_truncate(features as u32);
    let cfg = if config.is_null() {
        crate::config::read(None).map_err(|why| refuse(name, UCS_ERR_INVALID_PARAM, why))?
    } else {
        // SAFETY: a configuration from ucp_config_read.
        unsafe { &*config }.ucp.clone()
    };
    let ucp = UcpContext::new(ContextParams {
        features,
        config: Some(cfg),
    })
    .map_err(|e| fail(name, &e))?;
    let cname = if has(UCP_PARAM_FIELD_NAME) && !p.name.is_null() {
        // SAFETY: a C string from the caller.
        unsafe { CStr::from_ptr(p.name) }
            .to_string_lossy()
            .into_owned()
    } else {
        format!("rucx-{}", std::process::id())
    };
    Ok(Context {
        ucp,
        user_req_size: if has(UCP_PARAM_FIELD_REQUEST_SIZE) {
            p.request_size
        } else {
            0
        },
        request_init: if has(UCP_PARAM_FIELD_REQUEST_INIT) {
            p.request_init
        } else {
            None
        },
        request_cleanup: if has(UCP_PARAM_FIELD_REQUEST_CLEANUP) {
            p.request_cleanup
        } else {
            None
        },
        name: cname,
        workers: Mutex::new(Vec::new()),
        unbound: Mutex::new(Vec::new()),
        mt_workers_shared: has(UCP_PARAM_FIELD_MT_WORKERS_SHARED) && p.mt_workers_shared != 0,
        client_minor: api_minor,
        features: asked,
    })
}

/// `ucs_status_t ucp_init_version(unsigned api_major_version, unsigned api_minor_version,
/// const ucp_params_t *params, const ucp_config_t *config, ucp_context_h *context_p)`.
///
/// # Safety
/// Pointers as the header documents (`config` may be NULL: read from the environment).
#[no_mangle]
pub unsafe extern "C" fn ucp_init_version(
    api_major_version: c_uint,
    api_minor_version: c_uint,
    params: *const UcpParams,
    config: *const Config,
    context_p: *mut *mut Context,
) -> Status {
    const NAME: &str = "ucp_init_version";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if context_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "context_p is NULL");
        }
        // SAFETY: forwarded caller pointers.
        match unsafe { create(NAME, api_major_version, api_minor_version, params, config) } {
            Ok(c) => {
                // SAFETY: checked non-null.
                unsafe { *context_p = Box::into_raw(Box::new(c)) };
                UCS_OK
            }
            Err(s) => s,
        }
    })
}

/// `void ucp_cleanup(ucp_context_h context_p)`: frees the context (its workers must have been
/// destroyed).
///
/// # Safety
/// A context from `ucp_init_version`, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_cleanup(context_p: *mut Context) {
    ffi("ucp_cleanup", (), || {
        if !context_p.is_null() {
            // SAFETY: allocated by ucp_init_version.
            drop(unsafe { Box::from_raw(context_p) });
        }
    })
}

/// `void ucp_get_version(unsigned *major, unsigned *minor, unsigned *release)`: the UCX API
/// version rucx implements ([`API_MAJOR`].[`API_MINOR`], release 0).
///
/// # Safety
/// Writable pointers (NULL ones are skipped).
#[no_mangle]
pub unsafe extern "C" fn ucp_get_version(
    major: *mut c_uint,
    minor: *mut c_uint,
    release: *mut c_uint,
) {
    ffi("ucp_get_version", (), || {
        for (p, v) in [(major, API_MAJOR), (minor, API_MINOR), (release, 0)] {
            if !p.is_null() {
                // SAFETY: the caller's pointer.
                unsafe { *p = v };
            }
        }
    })
}

/// `const char *ucp_get_version_string(void)`.
#[no_mangle]
pub extern "C" fn ucp_get_version_string() -> *const c_char {
    c"1.22.0 (rucx)".as_ptr()
}

/// `ucs_status_t ucp_context_query(ucp_context_h context_p, ucp_context_attr_t *attr)`.
/// `request_size` is the size of rucx's request header, which is what a caller-supplied
/// request (`UCP_OP_ATTR_FIELD_REQUEST`) must have before the pointer it passes.
///
/// # Safety
/// A live context and a writable `attr` whose `field_mask` is set.
#[no_mangle]
pub unsafe extern "C" fn ucp_context_query(
    context_p: *mut Context,
    attr: *mut ContextAttr,
) -> Status {
    const NAME: &str = "ucp_context_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if context_p.is_null() || attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (c, a) = unsafe { (&*context_p, &mut *attr) };
        let known = UCP_ATTR_FIELD_REQUEST_SIZE
            | UCP_ATTR_FIELD_THREAD_MODE
            | UCP_ATTR_FIELD_MEMORY_TYPES
            | UCP_ATTR_FIELD_NAME
            | UCP_ATTR_FIELD_DEVICE_COUNTER_SIZE;
        if let Err(s) = check_mask(NAME, "ucp_context_attr_t.field_mask", a.field_mask, known) {
            return s;
        }
        if a.field_mask & UCP_ATTR_FIELD_REQUEST_SIZE != 0 {
            a.request_size = HDR_SIZE;
        }
        if a.field_mask & UCP_ATTR_FIELD_THREAD_MODE != 0 {
            a.thread_mode = UCS_THREAD_MODE_MULTI;
        }
        if a.field_mask & UCP_ATTR_FIELD_MEMORY_TYPES != 0 {
            a.memory_types = 1 << UCS_MEMORY_TYPE_HOST;
        }
        if a.field_mask & UCP_ATTR_FIELD_NAME != 0 {
            write_name(&mut a.name, &c.name);
        }
        if a.field_mask & UCP_ATTR_FIELD_DEVICE_COUNTER_SIZE != 0 {
            // UCX 1.22's `device_counter_size` follows the 64 bytes of `ucp_context_attr_t`
            // (only a client of that header sets the bit): no GPU-device counters, so 0.
            // SAFETY: the bit says the caller's struct has the field.
            unsafe { (attr as *mut u8).add(64).cast::<usize>().write_unaligned(0) };
        }
        UCS_OK
    })
}

/// The text `ucp_context_print_info` writes: one `# resource N : md N dev N flags -- tl/dev`
/// line per transport resource (the form Open MPI parses), memory domains numbered per
/// transport and devices per device name.
pub fn info_text(c: &Context) -> String {
    let res = c.ucp.resources();
    let mut mds: Vec<&str> = Vec::new();
    let mut devs: Vec<&str> = Vec::new();
    let mut out = format!(
        "#\n# UCP context (rucx)\n#\n#            name: {}\n",
        c.name
    );
    for (i, r) in res.iter().enumerate() {
        let md = mds.iter().position(|m| *m == r.tl_name).unwrap_or_else(|| {
            mds.push(r.tl_name);
            mds.len() - 1
        });
        let dev = devs
            .iter()
            .position(|d| *d == r.device.name)
            .unwrap_or_else(|| {
                devs.push(&r.device.name);
                devs.len() - 1
            });
        out += &format!(
            "#   resource {i:<2} :  md {md:<2} dev {dev:<2} flags -- {}/{}\n",
            r.tl_name, r.device.name
        );
    }
    out += "#\n";
    out
}

/// `void ucp_context_print_info(const ucp_context_h context, FILE *stream)`.
///
/// # Safety
/// A live context and an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_context_print_info(context: *const Context, stream: *mut libc::FILE) {
    const NAME: &str = "ucp_context_print_info";
    ffi(NAME, (), || {
        if context.is_null() || stream.is_null() {
            refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
            return;
        }
        // SAFETY: a live context.
        let text = info_text(unsafe { &*context });
        // SAFETY: writing our bytes to the caller's open stream.
        unsafe { libc::fwrite(text.as_ptr() as *const c_void, 1, text.len(), stream) };
    })
}
