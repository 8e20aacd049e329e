/*
 * Part of abi_layout.c (included there, after its helpers): what rucx accepts and refuses where
 * UCX 1.13 is lenient. Where UCX tests only the bits or values it knows and ignores the rest,
 * rucx does the same (clients such as Open MPI 4.1 pass uninitialised bits); where UCX returns
 * an error, so does rucx; unknown field_mask bits are refused. Parameter structs are filled with
 * garbage outside their field_mask, as clients that do not memset them leave them, so a field
 * read without its mask bit shows up as a failure.
 */

#define GARBAGE 0xa5

/* Contexts: unknown feature bits and an empty feature set are accepted (UCX ignores the one and
 * warns about the other); fields outside field_mask are not read. */
static void compat_context(ucp_config_t *cfg)
{
    ucp_params_t p;
    ucp_context_h c;
    memset(&p, GARBAGE, sizeof(p));
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG | (1ull << 30);
    REQUIRE(ucp_init(&p, cfg, &c) == UCS_OK, "unknown feature bit refused");
    ucp_context_attr_t a;
    memset(&a, GARBAGE, sizeof(a));
    a.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
    CHECK(ucp_context_query(c, &a) == UCS_OK, "query with garbage outside the mask");
    ucp_cleanup(c);
    p.features = 0;
    REQUIRE(ucp_init(&p, cfg, &c) == UCS_OK, "empty feature set refused");
    ucp_cleanup(c);
    p.field_mask |= 1ull << 40;
    p.features = UCP_FEATURE_TAG;
    CHECK(ucp_init(&p, cfg, &c) == UCS_ERR_INVALID_PARAM, "unknown field_mask bit accepted");
}

/* Configuration: the file name is ignored (UCX 1.13 does not read it); ucp_config_modify keeps
 * a name of no UCX table as a transport setting (UCS_OK, as UCX), checks the values of UCX's
 * variables (UCS_ERR_INVALID_PARAM for a bad one), and knows the global ucs ones. */
static void compat_config(void)
{
    ucp_config_t *cfg;
    REQUIRE(ucp_config_read(NULL, "/nonexistent/ucx.conf", &cfg) == UCS_OK, "file name refused");
    CHECK(ucp_config_modify(cfg, "NO_SUCH_SETTING", "1") == UCS_OK, "transport setting");
    CHECK(ucp_config_modify(cfg, "CM_REUSEADDR", "y") == UCS_OK, "CM_REUSEADDR");
    CHECK(ucp_config_modify(cfg, "HANDLE_ERRORS", "none") == UCS_OK, "HANDLE_ERRORS");
    CHECK(ucp_config_modify(cfg, "LOG_LEVEL", "warn") == UCS_OK, "LOG_LEVEL");
    CHECK(ucp_config_modify(cfg, "LOG_LEVEL", "chatty") == UCS_ERR_INVALID_PARAM, "bad LOG_LEVEL");
    CHECK(ucp_config_modify(cfg, "UNIFIED_MODE", "maybe") == UCS_ERR_INVALID_PARAM, "bad bool");
    CHECK(ucp_config_modify(cfg, "RNDV_THRESH", "lots") == UCS_ERR_INVALID_PARAM, "bad value");
    CHECK(ucp_config_modify(cfg, "RNDV_THRESH", "8k") == UCS_OK, "good value");
    compat_context(cfg);
    ucp_config_release(cfg);
}

/* Workers: unknown address flags, flush flags and AM handler flags below bit 15 are ignored;
 * AM handler flags from bit 15 and an unknown thread mode are refused, as in UCX. */
static void compat_worker(ucp_context_h ctx, ucp_worker_h w)
{
    ucp_worker_params_t wp;
    ucp_worker_h x;
    memset(&wp, GARBAGE, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    REQUIRE(ucp_worker_create(ctx, &wp, &x) == UCS_OK, "worker with garbage outside the mask");
    ucp_worker_destroy(x);
    wp.thread_mode = (ucs_thread_mode_t)7;
    CHECK(ucp_worker_create(ctx, &wp, &x) == UCS_ERR_INVALID_PARAM, "thread mode 7 accepted");

    ucp_worker_attr_t wa;
    memset(&wa, GARBAGE, sizeof(wa));
    wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    wa.address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY | (1u << 5);
    REQUIRE(ucp_worker_query(w, &wa) == UCS_OK, "unknown address flag refused");
    ucp_worker_release_address(w, wa.address);
    wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    REQUIRE(ucp_worker_query(w, &wa) == UCS_OK, "address flags read outside the mask");
    ucp_worker_release_address(w, wa.address);

    CHECK(wait_req(ucp_worker_flush_nb(w, 0x5, NULL)) == UCS_OK, "worker flush flags refused");
    CHECK(ucp_worker_set_am_handler(w, 9, am_handler, NULL, UCP_AM_FLAG_WHOLE_MSG | (1u << 3)) ==
              UCS_OK, "unknown AM handler flag below bit 15 refused");
    CHECK(ucp_worker_set_am_handler(w, 9, am_handler, NULL, 1u << 15) == UCS_ERR_INVALID_PARAM,
          "AM handler flag bit 15 accepted");
    CHECK(ucp_worker_set_am_handler(w, 9, NULL, NULL, 0) == UCS_OK, "removing handler 9");
}

/* Endpoints to a worker address: unknown flags (client/server ones included) and an unknown
 * error mode are ignored, every close mode but FORCE flushes, flush flags are ignored. */
static void compat_ep(ucp_worker_h from, ucp_worker_h to)
{
    ucp_address_t *a;
    size_t len;
    REQUIRE(ucp_worker_get_address(to, &a, &len) == UCS_OK, "address");
    ucp_ep_params_t p;
    memset(&p, GARBAGE, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = a;
    ucp_ep_h e;
    REQUIRE(ucp_ep_create(from, &p, &e) == UCS_OK, "ep with garbage outside the mask");
    CHECK(wait_req(ucp_ep_flush_nb(e, 0x3, NULL)) == UCS_OK, "ep flush flags refused");
    CHECK(wait_req(ucp_ep_close_nb(e, 42)) == UCS_OK, "close mode 42 (a flush in UCX)");
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_FLAGS |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER | (1u << 10);
    p.err_mode = (ucp_err_handling_mode_t)9;
    REQUIRE(ucp_ep_create(from, &p, &e) == UCS_OK, "ep flags / error mode refused");
    CHECK(wait_req(ucp_ep_close_nb(e, UCP_EP_CLOSE_MODE_FLUSH)) == UCS_OK, "close");
    p.field_mask |= 1ull << 40;
    CHECK(ucp_ep_create(from, &p, &e) == UCS_ERR_INVALID_PARAM, "unknown ep field_mask bit");
    ucp_worker_release_address(to, a);
}

/* Request parameters: unknown flag bits (16 and up) are ignored, unknown field bits refused;
 * fields outside op_attr_mask are not read. Memory maps: unknown flags are ignored. */
static void compat_request(ucp_context_h ctx, ucp_ep_h e01, ucp_worker_h w1)
{
    uint64_t out = 0xc0ffee, in = 0;
    ucp_request_param_t rp, sp;
    memset(&rp, GARBAGE, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | (1u << 27);
    rp.datatype = ucp_dt_make_contig(1);
    memset(&sp, GARBAGE, sizeof(sp));
    sp.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL | (1u << 30);
    void *r = ucp_tag_recv_nbx(w1, &in, sizeof(in), 0x77, ~0ull, &rp);
    void *s = ucp_tag_send_nbx(e01, &out, sizeof(out), 0x77, &sp);
    CHECK(!UCS_PTR_IS_ERR(r) && !UCS_PTR_IS_ERR(s), "unknown op_attr flag bits refused");
    CHECK(wait_req(s) == UCS_OK && wait_req(r) == UCS_OK && in == out, "send with stray flags");
    sp.op_attr_mask = 1u << 12;
    s = ucp_tag_send_nbx(e01, &out, sizeof(out), 0x77, &sp);
    CHECK(UCS_PTR_IS_ERR(s) && UCS_PTR_STATUS(s) == UCS_ERR_INVALID_PARAM, "unknown field bit");

    ucp_mem_map_params_t mp;
    ucp_mem_h memh;
    memset(&mp, GARBAGE, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = 4096;
    mp.flags = UCP_MEM_MAP_ALLOCATE | (1u << 9);
    REQUIRE(ucp_mem_map(ctx, &mp, &memh) == UCS_OK, "unknown mem_map flag refused");
    CHECK(ucp_mem_unmap(ctx, memh) == UCS_OK, "unmap");
    mp.field_mask |= 1ull << 30;
    CHECK(ucp_mem_map(ctx, &mp, &memh) == UCS_ERR_INVALID_PARAM, "unknown mem_map field bit");
}
