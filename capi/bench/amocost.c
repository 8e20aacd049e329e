/*
 * Cost of one fetch-add through libucp, both sides in one thread, for amo-instr.sh.
 *
 * Usage: amocost ITERS [static|heap|idle]
 * Two workers of one context in this process; worker A has an endpoint to worker B. B maps a
 * word for remote access: "static" registers a static variable of this program (private memory,
 * as OpenSHMEM's symmetric data: no shared-memory transport reaches it, so the target's worker
 * applies the atomic on request), "heap" lets libucp allocate it (UCP_MEM_MAP_ALLOCATE, a
 * shared segment when a shared-memory transport is on). Each iteration does what Open MPI 4.1's
 * shmem_long_atomic_fetch_add does over UCX: ucp_atomic_op_nbx(ADD, 1) with a reply buffer and
 * no callback and, when a request comes back, ucp_request_check_status + ucp_worker_progress
 * (here on A and then B, B standing for the target's progress loop) until it is done, then
 * ucp_request_free. One thread does
 * everything, so the work per operation does not depend on timing and an instruction counter
 * (callgrind) sees the same count run after run. Every fetched value is checked (the counter
 * counts the iterations); a wrong one exits with 1. "idle" makes the static setup and then
 * calls ucp_worker_progress(A) and ucp_worker_progress(B) ITERS times with nothing to do (the
 * cost of the two progress calls of each fetch-add that find nothing). Prints "rank 0 libucp
 * PATH" and "ns_per_amo NS" (wall clock over ITERS, after a warm-up).
 */
#include "../tests/mpi/libucp_path.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

static uint64_t counter;

static void check(ucs_status_t st, const char *what)
{
    if (st != UCS_OK) {
        fprintf(stderr, "%s: %s\n", what, ucs_status_string(st));
        exit(1);
    }
}

/* One fetch-add of 1 on the word at `addr`, as Open MPI 4.1's OpenSHMEM (atomic ucx) does it;
 * returns the old value. */
static uint64_t fadd(ucp_worker_h a, ucp_worker_h b, ucp_ep_h ep, uint64_t addr, ucp_rkey_h rkey)
{
    uint64_t old = 0, one = 1;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                                                 UCP_OP_ATTR_FIELD_REPLY_BUFFER,
                                 .datatype = ucp_dt_make_contig(sizeof(old)),
                                 .reply_buffer = &old};
    void *req = ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &one, 1, addr, rkey, &param);
    if (req == NULL) {
        return old;
    }
    if (UCS_PTR_IS_ERR(req)) {
        check(UCS_PTR_STATUS(req), "ucp_atomic_op_nbx");
    }
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(a);
        ucp_worker_progress(b);
    }
    check(st, "fetch-add");
    ucp_request_free(req);
    return old;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: amocost ITERS [static|heap]\n");
        return 2;
    }
    int iters = atoi(argv[1]);
    int heap = argc > 2 && strcmp(argv[2], "heap") == 0;
    int idle = argc > 2 && strcmp(argv[2], "idle") == 0;

    ucp_config_t *cfg;
    check(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64};
    ucp_context_h ctx;
    check(ucp_init(&params, cfg, &ctx), "ucp_init");
    ucp_config_release(cfg);

    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h a, b;
    /* B first: rucx makes a context's mappings with its first worker (UCX with the context). */
    check(ucp_worker_create(ctx, &wp, &b), "worker b");
    check(ucp_worker_create(ctx, &wp, &a), "worker a");
    ucp_address_t *addr;
    size_t addr_len;
    check(ucp_worker_get_address(b, &addr, &addr_len), "get_address");
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                 .address = addr};
    ucp_ep_h ep;
    check(ucp_ep_create(a, &ep_params, &ep), "ep_create");
    ucp_worker_release_address(b, addr);

    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                             UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = &counter,
                               .length = sizeof(counter)};
    if (heap) {
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.flags = UCP_MEM_MAP_ALLOCATE;
        mp.length = 4096;
    }
    ucp_mem_h memh;
    check(ucp_mem_map(ctx, &mp, &memh), "ucp_mem_map");
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    check(ucp_mem_query(memh, &ma), "ucp_mem_query");
    uint64_t *word = ma.address;
    *word = 0;
    void *packed;
    size_t packed_len;
    check(ucp_rkey_pack(ctx, memh, &packed, &packed_len), "ucp_rkey_pack");
    ucp_rkey_h rkey;
    check(ucp_ep_rkey_unpack(ep, packed, &rkey), "ucp_ep_rkey_unpack");
    ucp_rkey_buffer_release(packed);

    uint64_t expect = 0;
    for (int i = 0; i < 100; i++, expect++) {
        if (fadd(a, b, ep, (uint64_t)(uintptr_t)word, rkey) != expect) {
            fprintf(stderr, "warm-up fetch %d gave a wrong value\n", i);
            return 1;
        }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; idle && i < iters; i++) {
        ucp_worker_progress(a);
        ucp_worker_progress(b);
    }
    for (int i = 0; !idle && i < iters; i++, expect++) {
        if (fadd(a, b, ep, (uint64_t)(uintptr_t)word, rkey) != expect) {
            fprintf(stderr, "fetch %d gave a wrong value\n", i);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (*word != expect) {
        fprintf(stderr, "counter %llu, expected %llu\n", (unsigned long long)*word,
                (unsigned long long)expect);
        return 1;
    }
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    if (report_libucp(0) != 0) {
        return 1;
    }
    printf("ns_per_amo %.1f\n", iters > 0 ? ns / iters : 0.0);

    ucp_rkey_destroy(rkey);
    check(ucp_mem_unmap(ctx, memh), "ucp_mem_unmap");
    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *creq = ucp_ep_close_nbx(ep, &cp);
    while (creq != NULL && !UCS_PTR_IS_ERR(creq) &&
           ucp_request_check_status(creq) == UCS_INPROGRESS) {
        ucp_worker_progress(a);
        ucp_worker_progress(b);
    }
    if (creq != NULL && !UCS_PTR_IS_ERR(creq)) {
        ucp_request_free(creq);
    }
    ucp_worker_destroy(a);
    ucp_worker_destroy(b);
    ucp_cleanup(ctx);
    return 0;
}
