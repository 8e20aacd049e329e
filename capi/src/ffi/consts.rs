//! The rest of the constants of UCX's public ucp and ucs headers (log levels, configuration
//! print flags, async modes, memory types, …), and a lookup that lets a C test compare every
//! constant of the headers with the value rucx uses ([`rucx_ucp_constant`]).

use super::*;
use std::ffi::{c_char, c_int, CStr};

// ucp_atomic_op_t / ucp_atomic_post_op_t / ucp_atomic_fetch_op_t
pub const UCP_ATOMIC_OP_ADD: c_uint = 0;
pub const UCP_ATOMIC_OP_SWAP: c_uint = 1;
pub const UCP_ATOMIC_OP_CSWAP: c_uint = 2;
pub const UCP_ATOMIC_OP_AND: c_uint = 3;
pub const UCP_ATOMIC_OP_OR: c_uint = 4;
pub const UCP_ATOMIC_OP_XOR: c_uint = 5;
pub const UCP_ATOMIC_OP_LAST: c_uint = 6;
pub const UCP_ATOMIC_POST_OP_ADD: c_uint = 0;
pub const UCP_ATOMIC_POST_OP_AND: c_uint = 1;
pub const UCP_ATOMIC_POST_OP_OR: c_uint = 2;
pub const UCP_ATOMIC_POST_OP_XOR: c_uint = 3;
pub const UCP_ATOMIC_POST_OP_LAST: c_uint = 4;
pub const UCP_ATOMIC_FETCH_OP_FADD: c_uint = 0;
pub const UCP_ATOMIC_FETCH_OP_SWAP: c_uint = 1;
pub const UCP_ATOMIC_FETCH_OP_CSWAP: c_uint = 2;
pub const UCP_ATOMIC_FETCH_OP_FAND: c_uint = 3;
pub const UCP_ATOMIC_FETCH_OP_FOR: c_uint = 4;
pub const UCP_ATOMIC_FETCH_OP_FXOR: c_uint = 5;
pub const UCP_ATOMIC_FETCH_OP_LAST: c_uint = 6;
// ucp_mem_advise
pub const UCP_MADV_NORMAL: c_uint = 0;
pub const UCP_MADV_WILLNEED: c_uint = 1;
pub const UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS: u64 = bit(0);
pub const UCP_MEM_ADVISE_PARAM_FIELD_LENGTH: u64 = bit(1);
pub const UCP_MEM_ADVISE_PARAM_FIELD_ADVICE: u64 = bit(2);
// scatter-gather lists (UCX 1.20; refused: rucx has no SGL datatype)
pub const UCP_DT_LOCAL_SGL_FIELD_BUFFERS: u64 = bit(0);
pub const UCP_DT_LOCAL_SGL_FIELD_LENGTHS: u64 = bit(1);
pub const UCP_DT_LOCAL_SGL_FIELD_MEMHS: u64 = bit(2);
pub const UCP_DT_LOCAL_SGL_FIELD_COUNTS: u64 = bit(3);
pub const UCP_DT_LOCAL_SGL_FIELD_STRIDES: u64 = bit(4);
pub const UCP_DT_REMOTE_SGL_FIELD_REMOTE_ADDRS: u64 = bit(0);
pub const UCP_DT_REMOTE_SGL_FIELD_LENGTHS: u64 = bit(1);
pub const UCP_DT_REMOTE_SGL_FIELD_RKEYS: u64 = bit(2);
/// `UCP_REMOTE_ADDR_INVALID` (UCX 1.22).
pub const UCP_REMOTE_ADDR_INVALID: u64 = u64::MAX;
/// `UCP_RKEY_INVALID` (UCX 1.22): NULL.
pub const UCP_RKEY_INVALID: u64 = 0;
/// The API major of the version rucx implements (`UCP_API_MINOR` is the client's header's).
pub const UCP_API_MAJOR: c_uint = crate::context::API_MAJOR;
pub const UCP_VERSION_MAJOR_SHIFT: u32 = 24;
pub const UCP_VERSION_MINOR_SHIFT: u32 = 16;
// ucs_thread_mode_t
pub const UCS_THREAD_MODE_LAST: c_uint = 3;
// ucs_log_level_t
pub const UCS_LOG_LEVEL_FATAL: c_uint = 0;
pub const UCS_LOG_LEVEL_ERROR: c_uint = 1;
pub const UCS_LOG_LEVEL_WARN: c_uint = 2;
pub const UCS_LOG_LEVEL_DIAG: c_uint = 3;
pub const UCS_LOG_LEVEL_INFO: c_uint = 4;
pub const UCS_LOG_LEVEL_DEBUG: c_uint = 5;
pub const UCS_LOG_LEVEL_TRACE: c_uint = 6;
pub const UCS_LOG_LEVEL_TRACE_REQ: c_uint = 7;
pub const UCS_LOG_LEVEL_TRACE_DATA: c_uint = 8;
pub const UCS_LOG_LEVEL_TRACE_ASYNC: c_uint = 9;
pub const UCS_LOG_LEVEL_TRACE_FUNC: c_uint = 10;
pub const UCS_LOG_LEVEL_TRACE_POLL: c_uint = 11;
pub const UCS_LOG_LEVEL_LAST: c_uint = 12;
pub const UCS_LOG_LEVEL_PRINT: c_uint = 13;
// ucs_async_mode_t
pub const UCS_ASYNC_MODE_SIGNAL: c_uint = 0;
pub const UCS_ASYNC_MODE_THREAD: c_uint = 1;
pub const UCS_ASYNC_MODE_THREAD_SPINLOCK: c_uint = 1;
pub const UCS_ASYNC_MODE_THREAD_MUTEX: c_uint = 2;
pub const UCS_ASYNC_MODE_POLL: c_uint = 3;
pub const UCS_ASYNC_MODE_LAST: c_uint = 4;
// ucs_ternary_auto_value_t
pub const UCS_NO: c_uint = 0;
pub const UCS_YES: c_uint = 1;
pub const UCS_TRY: c_uint = 2;
pub const UCS_AUTO: c_uint = 3;
pub const UCS_TERNARY_LAST: c_uint = 4;
// ucs_on_off_auto_value_t
pub const UCS_CONFIG_OFF: c_uint = 0;
pub const UCS_CONFIG_ON: c_uint = 1;
pub const UCS_CONFIG_AUTO: c_uint = 2;
pub const UCS_CONFIG_ON_OFF_LAST: c_uint = 3;
// ucs_handle_error_t
pub const UCS_HANDLE_ERROR_BACKTRACE: c_uint = 0;
pub const UCS_HANDLE_ERROR_FREEZE: c_uint = 1;
pub const UCS_HANDLE_ERROR_DEBUG: c_uint = 2;
pub const UCS_HANDLE_ERROR_NONE: c_uint = 3;
pub const UCS_HANDLE_ERROR_LAST: c_uint = 4;
// ucs_config_print_flags_t
pub const UCS_CONFIG_PRINT_CONFIG: u32 = 1 << 0;
pub const UCS_CONFIG_PRINT_HEADER: u32 = 1 << 1;
pub const UCS_CONFIG_PRINT_DOC: u32 = 1 << 2;
pub const UCS_CONFIG_PRINT_HIDDEN: u32 = 1 << 3;
pub const UCS_CONFIG_PRINT_COMMENT_DEFAULT: u32 = 1 << 4;
// ucs_config_allow_list_mode_t
pub const UCS_CONFIG_ALLOW_LIST_ALLOW_ALL: c_uint = 0;
pub const UCS_CONFIG_ALLOW_LIST_ALLOW: c_uint = 1;
pub const UCS_CONFIG_ALLOW_LIST_NEGATE: c_uint = 2;
/// `ucs_cpu_set_t` bits (`ucp_worker_params_t.cpu_mask`).
pub const UCS_CPU_SETSIZE: usize = 1024;
pub const UCS_ALLOCA_MAX_SIZE: usize = 1200;
/// `UCS_MEM_FLAG_REGISTRABLE` (UCX 1.22).
pub const UCS_MEM_FLAG_REGISTRABLE: u32 = 1;

/// A constant's value as the header of API minor `minor` defines it: rucx's declaration, or
/// for the memory types (which grew between releases) the value of that release
/// ([`crate::memtype`]). `None`: rucx declares no such constant.
pub fn constant(name: &str, minor: u32) -> Option<i64> {
    if let Some(v) = crate::memtype::constant(name, minor) {
        return Some(v);
    }
    macro_rules! table {
        ($($c:ident),* $(,)?) => {
            match name {
                $(stringify!($c) => Some($c as i64),)*
                _ => None,
            }
        };
    }
    table![
        UCP_API_MAJOR,
        UCP_VERSION_MAJOR_SHIFT,
        UCP_VERSION_MINOR_SHIFT,
        UCP_ENTITY_NAME_MAX,
        UCP_PARAM_FIELD_FEATURES,
        UCP_PARAM_FIELD_REQUEST_SIZE,
        UCP_PARAM_FIELD_REQUEST_INIT,
        UCP_PARAM_FIELD_REQUEST_CLEANUP,
        UCP_PARAM_FIELD_TAG_SENDER_MASK,
        UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        UCP_PARAM_FIELD_ESTIMATED_NUM_PPN,
        UCP_PARAM_FIELD_NAME,
        UCP_PARAM_FIELD_NODE_LOCAL_ID,
        UCP_FEATURE_TAG,
        UCP_FEATURE_RMA,
        UCP_FEATURE_AMO32,
        UCP_FEATURE_AMO64,
        UCP_FEATURE_WAKEUP,
        UCP_FEATURE_STREAM,
        UCP_FEATURE_AM,
        UCP_FEATURE_EXPORTED_MEMH,
        UCP_FEATURE_DEVICE,
        UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        UCP_WORKER_PARAM_FIELD_CPU_MASK,
        UCP_WORKER_PARAM_FIELD_EVENTS,
        UCP_WORKER_PARAM_FIELD_USER_DATA,
        UCP_WORKER_PARAM_FIELD_EVENT_FD,
        UCP_WORKER_PARAM_FIELD_FLAGS,
        UCP_WORKER_PARAM_FIELD_NAME,
        UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT,
        UCP_WORKER_PARAM_FIELD_CLIENT_ID,
        UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK,
        UCP_LISTENER_PARAM_FIELD_SOCK_ADDR,
        UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER,
        UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        UCP_WORKER_ADDRESS_FLAG_NET_ONLY,
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        UCP_EP_PARAM_FIELD_ERR_HANDLER,
        UCP_EP_PARAM_FIELD_USER_DATA,
        UCP_EP_PARAM_FIELD_SOCK_ADDR,
        UCP_EP_PARAM_FIELD_FLAGS,
        UCP_EP_PARAM_FIELD_CONN_REQUEST,
        UCP_EP_PARAM_FIELD_NAME,
        UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR,
        UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
        UCP_EP_PARAMS_FLAGS_NO_LOOPBACK,
        UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID,
        UCP_EP_CLOSE_FLAG_FORCE,
        UCP_EP_CLOSE_MODE_FORCE,
        UCP_EP_CLOSE_MODE_FLUSH,
        UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE,
        UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME,
        UCP_ERR_HANDLING_MODE_NONE,
        UCP_ERR_HANDLING_MODE_PEER,
        UCP_ERR_HANDLING_MODE_FAILOVER,
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS,
        UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        UCP_MEM_MAP_PARAM_FIELD_PROT,
        UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER,
        UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS,
        UCP_MEM_ADVISE_PARAM_FIELD_LENGTH,
        UCP_MEM_ADVISE_PARAM_FIELD_ADVICE,
        UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL,
        UCP_MEM_ATTR_FIELD_ADDRESS,
        UCP_MEM_ATTR_FIELD_LENGTH,
        UCP_MEM_ATTR_FIELD_MEM_TYPE,
        UCP_ATTR_FIELD_REQUEST_SIZE,
        UCP_ATTR_FIELD_THREAD_MODE,
        UCP_ATTR_FIELD_MEMORY_TYPES,
        UCP_ATTR_FIELD_NAME,
        UCP_ATTR_FIELD_DEVICE_COUNTER_SIZE,
        UCP_WORKER_ATTR_FIELD_THREAD_MODE,
        UCP_WORKER_ATTR_FIELD_ADDRESS,
        UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
        UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER,
        UCP_WORKER_ATTR_FIELD_NAME,
        UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING,
        UCP_WORKER_ADDRESS_ATTR_FIELD_UID,
        UCP_LISTENER_ATTR_FIELD_SOCKADDR,
        UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR,
        UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID,
        UCP_DATATYPE_CONTIG,
        UCP_DATATYPE_STRIDED,
        UCP_DATATYPE_IOV,
        UCP_DATATYPE_SGL,
        UCP_DATATYPE_GENERIC,
        UCP_DATATYPE_SHIFT,
        UCP_DATATYPE_CLASS_MASK,
        UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE,
        UCP_DATATYPE_ATTR_FIELD_BUFFER,
        UCP_DATATYPE_ATTR_FIELD_COUNT,
        UCP_MEM_MAP_NONBLOCK,
        UCP_MEM_MAP_ALLOCATE,
        UCP_MEM_MAP_FIXED,
        UCP_MEM_MAP_SYMMETRIC_RKEY,
        UCP_MEM_MAP_LOCK,
        UCP_MEM_MAP_PROT_LOCAL_READ,
        UCP_MEM_MAP_PROT_LOCAL_WRITE,
        UCP_MEM_MAP_PROT_REMOTE_READ,
        UCP_MEM_MAP_PROT_REMOTE_WRITE,
        UCP_AM_FLAG_WHOLE_MSG,
        UCP_AM_FLAG_PERSISTENT_DATA,
        UCP_AM_SEND_FLAG_REPLY,
        UCP_AM_SEND_FLAG_EAGER,
        UCP_AM_SEND_FLAG_RNDV,
        UCP_AM_SEND_FLAG_COPY_HEADER,
        UCP_AM_SEND_REPLY,
        UCP_CB_PARAM_FLAG_DATA,
        UCP_ATOMIC_OP_ADD,
        UCP_ATOMIC_OP_SWAP,
        UCP_ATOMIC_OP_CSWAP,
        UCP_ATOMIC_OP_AND,
        UCP_ATOMIC_OP_OR,
        UCP_ATOMIC_OP_XOR,
        UCP_ATOMIC_OP_LAST,
        UCP_ATOMIC_POST_OP_ADD,
        UCP_ATOMIC_POST_OP_AND,
        UCP_ATOMIC_POST_OP_OR,
        UCP_ATOMIC_POST_OP_XOR,
        UCP_ATOMIC_POST_OP_LAST,
        UCP_ATOMIC_FETCH_OP_FADD,
        UCP_ATOMIC_FETCH_OP_SWAP,
        UCP_ATOMIC_FETCH_OP_CSWAP,
        UCP_ATOMIC_FETCH_OP_FAND,
        UCP_ATOMIC_FETCH_OP_FOR,
        UCP_ATOMIC_FETCH_OP_FXOR,
        UCP_ATOMIC_FETCH_OP_LAST,
        UCP_STREAM_RECV_FLAG_WAITALL,
        UCP_OP_ATTR_FIELD_REQUEST,
        UCP_OP_ATTR_FIELD_CALLBACK,
        UCP_OP_ATTR_FIELD_USER_DATA,
        UCP_OP_ATTR_FIELD_DATATYPE,
        UCP_OP_ATTR_FIELD_FLAGS,
        UCP_OP_ATTR_FIELD_REPLY_BUFFER,
        UCP_OP_ATTR_FIELD_MEMORY_TYPE,
        UCP_OP_ATTR_FIELD_RECV_INFO,
        UCP_OP_ATTR_FIELD_MEMH,
        UCP_OP_ATTR_FIELD_REMOTE_DATATYPE,
        UCP_OP_ATTR_FIELD_REMOTE,
        UCP_OP_ATTR_FIELD_REMOTE_COUNT,
        UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        UCP_OP_ATTR_FLAG_FAST_CMPL,
        UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
        UCP_OP_ATTR_FLAG_MULTI_SEND,
        UCP_REQUEST_ATTR_FIELD_INFO_STRING,
        UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE,
        UCP_REQUEST_ATTR_FIELD_STATUS,
        UCP_REQUEST_ATTR_FIELD_MEM_TYPE,
        UCP_AM_RECV_ATTR_FIELD_REPLY_EP,
        UCP_AM_RECV_ATTR_FLAG_DATA,
        UCP_AM_RECV_ATTR_FLAG_RNDV,
        UCP_AM_HANDLER_PARAM_FIELD_ID,
        UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        UCP_AM_HANDLER_PARAM_FIELD_CB,
        UCP_AM_HANDLER_PARAM_FIELD_ARG,
        UCP_DT_LOCAL_SGL_FIELD_BUFFERS,
        UCP_DT_LOCAL_SGL_FIELD_LENGTHS,
        UCP_DT_LOCAL_SGL_FIELD_MEMHS,
        UCP_DT_LOCAL_SGL_FIELD_COUNTS,
        UCP_DT_LOCAL_SGL_FIELD_STRIDES,
        UCP_DT_REMOTE_SGL_FIELD_REMOTE_ADDRS,
        UCP_DT_REMOTE_SGL_FIELD_LENGTHS,
        UCP_DT_REMOTE_SGL_FIELD_RKEYS,
        UCP_MADV_NORMAL,
        UCP_MADV_WILLNEED,
        UCP_MEMH_PACK_PARAM_FIELD_FLAGS,
        UCP_MEMH_PACK_FLAG_EXPORT,
        UCP_EP_ATTR_FIELD_NAME,
        UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR,
        UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR,
        UCP_EP_ATTR_FIELD_TRANSPORTS,
        UCP_EP_ATTR_FIELD_USER_DATA,
        UCP_WAKEUP_RMA,
        UCP_WAKEUP_AMO,
        UCP_WAKEUP_TAG_SEND,
        UCP_WAKEUP_TAG_RECV,
        UCP_WAKEUP_TX,
        UCP_WAKEUP_RX,
        UCP_WAKEUP_EDGE,
        UCP_REMOTE_ADDR_INVALID,
        UCP_RKEY_INVALID,
        UCS_OK,
        UCS_INPROGRESS,
        UCS_ERR_NO_MESSAGE,
        UCS_ERR_NO_RESOURCE,
        UCS_ERR_IO_ERROR,
        UCS_ERR_NO_MEMORY,
        UCS_ERR_INVALID_PARAM,
        UCS_ERR_UNREACHABLE,
        UCS_ERR_INVALID_ADDR,
        UCS_ERR_NOT_IMPLEMENTED,
        UCS_ERR_MESSAGE_TRUNCATED,
        UCS_ERR_NO_PROGRESS,
        UCS_ERR_BUFFER_TOO_SMALL,
        UCS_ERR_NO_ELEM,
        UCS_ERR_SOME_CONNECTS_FAILED,
        UCS_ERR_NO_DEVICE,
        UCS_ERR_BUSY,
        UCS_ERR_CANCELED,
        UCS_ERR_SHMEM_SEGMENT,
        UCS_ERR_ALREADY_EXISTS,
        UCS_ERR_OUT_OF_RANGE,
        UCS_ERR_TIMED_OUT,
        UCS_ERR_EXCEEDS_LIMIT,
        UCS_ERR_UNSUPPORTED,
        UCS_ERR_REJECTED,
        UCS_ERR_NOT_CONNECTED,
        UCS_ERR_CONNECTION_RESET,
        UCS_ERR_FIRST_LINK_FAILURE,
        UCS_ERR_LAST_LINK_FAILURE,
        UCS_ERR_FIRST_ENDPOINT_FAILURE,
        UCS_ERR_ENDPOINT_TIMEOUT,
        UCS_ERR_LAST_ENDPOINT_FAILURE,
        UCS_ERR_LAST,
        UCS_THREAD_MODE_SINGLE,
        UCS_THREAD_MODE_SERIALIZED,
        UCS_THREAD_MODE_MULTI,
        UCS_THREAD_MODE_LAST,
        UCS_LOG_LEVEL_FATAL,
        UCS_LOG_LEVEL_ERROR,
        UCS_LOG_LEVEL_WARN,
        UCS_LOG_LEVEL_DIAG,
        UCS_LOG_LEVEL_INFO,
        UCS_LOG_LEVEL_DEBUG,
        UCS_LOG_LEVEL_TRACE,
        UCS_LOG_LEVEL_TRACE_REQ,
        UCS_LOG_LEVEL_TRACE_DATA,
        UCS_LOG_LEVEL_TRACE_ASYNC,
        UCS_LOG_LEVEL_TRACE_FUNC,
        UCS_LOG_LEVEL_TRACE_POLL,
        UCS_LOG_LEVEL_LAST,
        UCS_LOG_LEVEL_PRINT,
        UCS_ASYNC_MODE_SIGNAL,
        UCS_ASYNC_MODE_THREAD,
        UCS_ASYNC_MODE_THREAD_SPINLOCK,
        UCS_ASYNC_MODE_THREAD_MUTEX,
        UCS_ASYNC_MODE_POLL,
        UCS_ASYNC_MODE_LAST,
        UCS_NO,
        UCS_YES,
        UCS_TRY,
        UCS_AUTO,
        UCS_TERNARY_LAST,
        UCS_CONFIG_OFF,
        UCS_CONFIG_ON,
        UCS_CONFIG_AUTO,
        UCS_CONFIG_ON_OFF_LAST,
        UCS_HANDLE_ERROR_BACKTRACE,
        UCS_HANDLE_ERROR_FREEZE,
        UCS_HANDLE_ERROR_DEBUG,
        UCS_HANDLE_ERROR_NONE,
        UCS_HANDLE_ERROR_LAST,
        UCS_CONFIG_PRINT_CONFIG,
        UCS_CONFIG_PRINT_HEADER,
        UCS_CONFIG_PRINT_DOC,
        UCS_CONFIG_PRINT_HIDDEN,
        UCS_CONFIG_PRINT_COMMENT_DEFAULT,
        UCS_CONFIG_ALLOW_LIST_ALLOW_ALL,
        UCS_CONFIG_ALLOW_LIST_ALLOW,
        UCS_CONFIG_ALLOW_LIST_NEGATE,
        UCS_CPU_SETSIZE,
        UCS_ALLOCA_MAX_SIZE,
        UCS_MEM_FLAG_REGISTRABLE,
    ]
}

/// `int rucx_ucp_constant(const char *name, unsigned api_minor, int64_t *value)`: the value
/// rucx uses for the constant `name` of UCX's headers of API minor `api_minor`; 1 and the
/// value when rucx declares it, 0 otherwise. Not part of UCX's API: the constants test
/// (`capi/tests/c/constants.sh`) compares every constant of the headers through it.
///
/// # Safety
/// `name` a C string, `value` writable.
#[no_mangle]
pub unsafe extern "C" fn rucx_ucp_constant(
    name: *const c_char,
    api_minor: c_uint,
    value: *mut i64,
) -> c_int {
    crate::guard::ffi("rucx_ucp_constant", 0, || {
        if name.is_null() || value.is_null() {
            return 0;
        }
        // SAFETY: the caller's C string.
        let n = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        match constant(&n, api_minor) {
            Some(v) => {
                // SAFETY: checked non-null.
                unsafe { *value = v };
                1
            }
            None => 0,
        }
    })
}
