/*
 * ucp_put_nbx with scattered local data, against UCX 1.22's headers: an IOV datatype (pieces
 * gathered to one remote range) and UCX 1.20's scatter-gather lists (ucp_dt_make_sgl() on both
 * sides: element i's blocks, counts[i] of lengths[i] bytes strides[i] apart, land one after
 * another at remote_addrs[i] with rkeys[i]). Two workers of one process (UCX_TLS picks the
 * transport); the context maps a region (rucx maps memory with the context's first worker, B
 * here), worker A writes into it and flushes, and the region is compared byte by byte with
 * what was meant, including the bytes that must stay untouched.
 * Malformed lists (lengths that do not match, element counts that differ, a NULL key or array)
 * must fail with an error status and write nothing.
 *
 * Build: cc -I UCX122_INCLUDE sgl_put.c -lucp -lucs; run with LD_LIBRARY_PATH at the library.
 * Prints "sgl_put: OK" and exits 0 when every check holds.
 */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGION 4096

static int failures;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "sgl_put: FAIL line %d: ", __LINE__);                              \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

static ucp_worker_h wa, wb;

static ucs_status_t wait_for(void *req)
{
    ucs_status_t s;
    if (req == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }
    do {
        ucp_worker_progress(wa);
        ucp_worker_progress(wb);
        s = ucp_request_check_status(req);
    } while (s == UCS_INPROGRESS);
    ucp_request_free(req);
    return s;
}

static ucs_status_t flush_a(ucp_ep_h ep)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    return wait_for(ucp_ep_flush_nbx(ep, &p));
}

/* Puts with an SGL on both sides; gives the status. */
static ucs_status_t sgl_put(ucp_ep_h ep, const ucp_dt_local_sgl_t *local,
                            const ucp_dt_remote_sgl_t *remote, size_t count,
                            size_t remote_count, int no_imm)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REMOTE_DATATYPE |
                     UCP_OP_ATTR_FIELD_REMOTE | UCP_OP_ATTR_FIELD_REMOTE_COUNT;
    if (no_imm) {
        p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    }
    p.datatype        = ucp_dt_make_sgl();
    p.remote_datatype = ucp_dt_make_sgl();
    p.remote          = remote;
    p.remote_count    = remote_count;
    return wait_for(ucp_put_nbx(ep, local, count, UCP_REMOTE_ADDR_INVALID, UCP_RKEY_INVALID, &p));
}

int main(void)
{
    ucp_params_t cp;
    ucp_context_h ctx;
    ucp_worker_params_t wp;
    ucp_ep_params_t ep_params;
    ucp_address_t *addr;
    size_t addr_len;
    ucp_ep_h ep;
    ucp_mem_map_params_t mp;
    ucp_mem_h memh;
    void *rkey_buf;
    size_t rkey_len;
    ucp_rkey_h rkey;
    unsigned char *region = aligned_alloc(64, REGION);
    unsigned char expect[REGION];
    unsigned char src[256];
    uint64_t base;
    size_t i;

    memset(&cp, 0, sizeof(cp));
    cp.field_mask = UCP_PARAM_FIELD_FEATURES;
    cp.features   = UCP_FEATURE_RMA;
    if (ucp_init(&cp, NULL, &ctx) != UCS_OK) {
        fprintf(stderr, "sgl_put: ucp_init failed\n");
        return 1;
    }
    memset(&wp, 0, sizeof(wp));
    if (ucp_worker_create(ctx, &wp, &wb) != UCS_OK || ucp_worker_create(ctx, &wp, &wa) != UCS_OK) {
        fprintf(stderr, "sgl_put: ucp_worker_create failed\n");
        return 1;
    }
    if (ucp_worker_get_address(wb, &addr, &addr_len) != UCS_OK) {
        fprintf(stderr, "sgl_put: ucp_worker_get_address failed\n");
        return 1;
    }
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = addr;
    if (ucp_ep_create(wa, &ep_params, &ep) != UCS_OK) {
        fprintf(stderr, "sgl_put: ucp_ep_create failed\n");
        return 1;
    }
    memset(region, 0xee, REGION);
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = region;
    mp.length     = REGION;
    if (ucp_mem_map(ctx, &mp, &memh) != UCS_OK ||
        ucp_rkey_pack(ctx, memh, &rkey_buf, &rkey_len) != UCS_OK ||
        ucp_ep_rkey_unpack(ep, rkey_buf, &rkey) != UCS_OK) {
        fprintf(stderr, "sgl_put: mapping or key failed\n");
        return 1;
    }
    base = (uint64_t)(uintptr_t)region;
    for (i = 0; i < sizeof(src); i++) {
        src[i] = (unsigned char)(i + 1);
    }
    memcpy(expect, region, REGION);

    /* IOV: three pieces gathered to offset 100. */
    {
        ucp_dt_iov_t iov[3] = {{src, 5}, {src + 50, 0}, {src + 20, 7}};
        ucp_request_param_t p;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
        p.datatype     = ucp_dt_make_iov();
        CHECK(wait_for(ucp_put_nbx(ep, iov, 3, base + 100, rkey, &p)) == UCS_OK, "IOV put");
        memcpy(expect + 100, src, 5);
        memcpy(expect + 105, src + 20, 7);
    }

    /* SGL, one block per element: three elements to three places. */
    {
        void *bufs[3]         = {src, src + 10, src + 40};
        size_t lens[3]        = {4, 16, 1};
        uint64_t raddrs[3]    = {base + 1000, base + 200, base + 3000};
        ucp_rkey_h rkeys[3]   = {rkey, rkey, rkey};
        ucp_dt_local_sgl_t l  = {UCP_DT_LOCAL_SGL_FIELD_BUFFERS | UCP_DT_LOCAL_SGL_FIELD_LENGTHS,
                                 bufs, lens, NULL, NULL, NULL};
        ucp_dt_remote_sgl_t r = {UCP_DT_REMOTE_SGL_FIELD_REMOTE_ADDRS |
                                 UCP_DT_REMOTE_SGL_FIELD_LENGTHS | UCP_DT_REMOTE_SGL_FIELD_RKEYS,
                                 raddrs, lens, rkeys};
        CHECK(sgl_put(ep, &l, &r, 3, 3, 0) == UCS_OK, "SGL put");
        memcpy(expect + 1000, src, 4);
        memcpy(expect + 200, src + 10, 16);
        memcpy(expect + 3000, src + 40, 1);
        /* The same with a request asked for (NO_IMM_CMPL). */
        raddrs[0] = base + 1500;
        CHECK(sgl_put(ep, &l, &r, 3, 3, 1) == UCS_OK, "SGL put with NO_IMM_CMPL");
        memcpy(expect + 1500, src, 4);
    }

    /* SGL with counts and strides: 3 blocks of 4 bytes, 10 apart, land as 12 bytes. */
    {
        void *bufs[2]         = {src + 100, src + 200};
        size_t lens[2]        = {4, 8};
        size_t counts[2]      = {3, 1};
        size_t strides[2]     = {10, 0};
        size_t rlens[2]       = {12, 8};
        uint64_t raddrs[2]    = {base + 2000, base + 2100};
        ucp_rkey_h rkeys[2]   = {rkey, rkey};
        ucp_dt_local_sgl_t l  = {UCP_DT_LOCAL_SGL_FIELD_BUFFERS | UCP_DT_LOCAL_SGL_FIELD_LENGTHS |
                                     UCP_DT_LOCAL_SGL_FIELD_COUNTS |
                                     UCP_DT_LOCAL_SGL_FIELD_STRIDES,
                                 bufs, lens, NULL, counts, strides};
        ucp_dt_remote_sgl_t r = {UCP_DT_REMOTE_SGL_FIELD_REMOTE_ADDRS |
                                 UCP_DT_REMOTE_SGL_FIELD_LENGTHS | UCP_DT_REMOTE_SGL_FIELD_RKEYS,
                                 raddrs, rlens, rkeys};
        CHECK(sgl_put(ep, &l, &r, 2, 2, 0) == UCS_OK, "strided SGL put");
        for (i = 0; i < 3; i++) {
            memcpy(expect + 2000 + 4 * i, src + 100 + 10 * i, 4);
        }
        memcpy(expect + 2100, src + 200, 8);

        /* Malformed: nothing may be written. */
        rlens[1] = 9;
        CHECK(sgl_put(ep, &l, &r, 2, 2, 0) != UCS_OK, "lengths that do not match");
        rlens[1] = 8;
        raddrs[0] = base + 2500;
        CHECK(sgl_put(ep, &l, &r, 2, 1, 0) != UCS_OK, "element counts that differ");
        rkeys[1] = NULL;
        CHECK(sgl_put(ep, &l, &r, 2, 2, 0) != UCS_OK, "a NULL key");
        rkeys[1] = rkey;
        r.lengths = NULL;
        CHECK(sgl_put(ep, &l, &r, 2, 2, 0) != UCS_OK, "a NULL array");
    }

    CHECK(flush_a(ep) == UCS_OK, "flush");
    for (i = 0; i < REGION; i++) {
        if (region[i] != expect[i]) {
            CHECK(0, "byte %zu is %u, expected %u", i, region[i], expect[i]);
            break;
        }
    }

    ucp_rkey_destroy(rkey);
    ucp_rkey_buffer_release(rkey_buf);
    ucp_mem_unmap(ctx, memh);
    {
        ucp_request_param_t p;
        memset(&p, 0, sizeof(p));
        wait_for(ucp_ep_close_nbx(ep, &p));
    }
    ucp_worker_release_address(wb, addr);
    ucp_worker_destroy(wa);
    ucp_worker_destroy(wb);
    ucp_cleanup(ctx);
    free(region);
    if (failures) {
        return 1;
    }
    printf("sgl_put: OK\n");
    return 0;
}
