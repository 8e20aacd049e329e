/*
 * Part of abi_layout.c (included there, after CHECK): the struct sizes, field offsets and
 * constants of UCX 1.13's headers that rucx's ffi.rs is written for.
 */

/* The sizes rucx's ffi.rs is written for (it asserts them at compile time). */
static void layout(void)
{
    CHECK(sizeof(ucs_status_t) == 1, "%zu", sizeof(ucs_status_t));
    CHECK(sizeof(ucp_params_t) == 80, "%zu", sizeof(ucp_params_t));
    CHECK(offsetof(ucp_params_t, request_size) == 16, "-");
    CHECK(offsetof(ucp_params_t, request_init) == 24, "-");
    CHECK(offsetof(ucp_params_t, request_cleanup) == 32, "-");
    CHECK(offsetof(ucp_params_t, mt_workers_shared) == 48, "-");
    CHECK(offsetof(ucp_params_t, name) == 72, "-");
    CHECK(sizeof(ucp_context_attr_t) == 64, "%zu", sizeof(ucp_context_attr_t));
    CHECK(offsetof(ucp_context_attr_t, request_size) == 8, "-");
    CHECK(offsetof(ucp_context_attr_t, thread_mode) == 16, "-");
    CHECK(offsetof(ucp_context_attr_t, memory_types) == 24, "-");
    CHECK(offsetof(ucp_context_attr_t, name) == 32, "-");
    CHECK(sizeof(ucp_worker_params_t) == 200, "%zu", sizeof(ucp_worker_params_t));
    CHECK(offsetof(ucp_worker_params_t, thread_mode) == 8, "-");
    CHECK(offsetof(ucp_worker_params_t, events) == 144, "-");
    CHECK(offsetof(ucp_worker_params_t, flags) == 168, "-");
    CHECK(offsetof(ucp_worker_params_t, name) == 176, "-");
    CHECK(offsetof(ucp_worker_params_t, client_id) == 192, "-");
    CHECK(sizeof(ucp_worker_attr_t) == 80, "%zu", sizeof(ucp_worker_attr_t));
    CHECK(offsetof(ucp_worker_attr_t, address_flags) == 12, "-");
    CHECK(offsetof(ucp_worker_attr_t, address) == 16, "-");
    CHECK(offsetof(ucp_worker_attr_t, address_length) == 24, "-");
    CHECK(offsetof(ucp_worker_attr_t, name) == 40, "-");
    CHECK(offsetof(ucp_worker_attr_t, max_debug_string) == 72, "-");
    CHECK(sizeof(ucp_ep_params_t) == 104, "%zu", sizeof(ucp_ep_params_t));
    CHECK(offsetof(ucp_ep_params_t, address) == 8, "-");
    CHECK(offsetof(ucp_ep_params_t, err_mode) == 16, "-");
    CHECK(offsetof(ucp_ep_params_t, err_handler) == 24, "-");
    CHECK(offsetof(ucp_ep_params_t, user_data) == 40, "-");
    CHECK(offsetof(ucp_ep_params_t, flags) == 48, "-");
    CHECK(offsetof(ucp_ep_params_t, sockaddr) == 56, "-");
    CHECK(offsetof(ucp_ep_params_t, conn_request) == 72, "-");
    CHECK(offsetof(ucp_ep_params_t, name) == 80, "-");
    CHECK(offsetof(ucp_ep_params_t, local_sockaddr) == 88, "-");
    CHECK(sizeof(ucp_request_param_t) == 72, "%zu", sizeof(ucp_request_param_t));
    CHECK(offsetof(ucp_request_param_t, flags) == 4, "-");
    CHECK(offsetof(ucp_request_param_t, request) == 8, "-");
    CHECK(offsetof(ucp_request_param_t, cb) == 16, "-");
    CHECK(offsetof(ucp_request_param_t, datatype) == 24, "-");
    CHECK(offsetof(ucp_request_param_t, user_data) == 32, "-");
    CHECK(offsetof(ucp_request_param_t, reply_buffer) == 40, "-");
    CHECK(offsetof(ucp_request_param_t, memory_type) == 48, "-");
    CHECK(offsetof(ucp_request_param_t, recv_info) == 56, "-");
    CHECK(offsetof(ucp_request_param_t, memh) == 64, "-");
    CHECK(sizeof(ucp_tag_recv_info_t) == 16, "-");
    CHECK(offsetof(ucp_tag_recv_info_t, length) == 8, "-");
    CHECK(sizeof(ucp_dt_iov_t) == 16, "-");
    CHECK(sizeof(ucp_generic_dt_ops_t) == 48, "-");
    CHECK(offsetof(ucp_generic_dt_ops_t, unpack) == 32, "-");
    CHECK(sizeof(ucp_mem_map_params_t) == 40, "%zu", sizeof(ucp_mem_map_params_t));
    CHECK(offsetof(ucp_mem_map_params_t, flags) == 24, "-");
    CHECK(offsetof(ucp_mem_map_params_t, memory_type) == 32, "-");
    CHECK(sizeof(ucp_mem_attr_t) == 32, "%zu", sizeof(ucp_mem_attr_t));
    CHECK(sizeof(ucp_err_handler_t) == 16, "-");
    CHECK(sizeof(ucp_mem_advise_params_t) == 32, "%zu", sizeof(ucp_mem_advise_params_t));
    CHECK(offsetof(ucp_mem_advise_params_t, advice) == 24, "-");
    CHECK(UCP_DATATYPE_GENERIC == 7 && UCP_DATATYPE_IOV == 2 && UCP_DATATYPE_SHIFT == 3, "-");
    CHECK(ucp_dt_make_contig(4) == 32, "-");
    CHECK(UCP_OP_ATTR_FLAG_NO_IMM_CMPL == (1u << 16), "-");
}
